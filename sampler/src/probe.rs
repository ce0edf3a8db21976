//! `cufall probe-sampler` (hidden): measures what the docs and the pipeline rely on, on the GPU
//! at hand, and prints it as JSON: metric catalogue facts, counter-data image size per sample,
//! the intervals CUPTI accepts, the cost of initialising and resetting images.

use cufall_cupti::host::MetricList;
use cufall_cupti::metric::Catalogue;
use cufall_cupti::{Cupti, CuptiError, DecodeStop, HostKind, PmSampler, ProfilerHost};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, clap::Args)]
pub struct ProbeArgs {
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

const NAMES: [&str; 14] = [
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.min.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.max.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg",
    "sm__pipe_tensor_cycles_active.sum",
    "sm__pipe_tensor_cycles_active.avg.peak_sustained",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gr__cycles_elapsed.max",
    "gr__cycles_elapsed.avg.per_second",
    "sm__cycles_elapsed.avg",
    "sm__cycles_elapsed.avg.per_second",
    "sm__cycles_active.avg",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
];

fn err(e: &CuptiError) -> Value {
    json!(e.to_string())
}

pub fn run(args: &ProbeArgs) -> anyhow::Result<i32> {
    let cupti = Cupti::init()?;
    let mut out = serde_json::Map::new();
    out.insert("cupti_library".into(), json!(cupti.cupti_source));
    let chip = cupti.chip_name(args.device)?;
    out.insert("chip".into(), json!(chip));
    let avail = cupti.pm_counter_availability(args.device)?;
    out.insert("availability_bytes".into(), json!(avail.len()));
    let host = ProfilerHost::new(&cupti, HostKind::PmSampling, &chip, Some(avail.clone()))?;
    let range = ProfilerHost::new(&cupti, HostKind::RangeProfiler, &chip, None).ok();
    let all = host.all_base_metrics()?;
    out.insert("pm_base_metrics".into(), json!(all.len()));
    if let Some(r) = &range {
        out.insert(
            "range_profiler_base_metrics".into(),
            json!(r.all_base_metrics().map(|v| v.len()).unwrap_or(0)),
        );
    }
    out.insert(
        "max_metrics_per_pass".into(),
        json!(host.max_metrics_per_pass().ok()),
    );
    let cat = Catalogue::read(&host, range.as_ref())?;
    let mut subs = serde_json::Map::new();
    for base in [
        "sm__pipe_tensor_cycles_active",
        "dram__throughput",
        "gr__cycles_elapsed",
        "sm__cycles_elapsed",
    ] {
        if let Some(k) = cat.bases.get(base) {
            let p = host.properties(base).ok();
            subs.insert(
                base.into(),
                json!({
                    "kind": k.as_str(),
                    "sub_metrics": host.sub_metrics(base, *k).unwrap_or_default(),
                    "dim_unit": p.as_ref().map(|p| p.dim_unit.clone()),
                    "hw_unit": p.as_ref().map(|p| p.hw_unit.clone()),
                    "description": p.as_ref().map(|p| p.description.clone()),
                }),
            );
        } else {
            subs.insert(base.into(), json!("not a PM sampling base metric"));
        }
    }
    out.insert("bases".into(), Value::Object(subs));
    let mut valid = serde_json::Map::new();
    for n in NAMES {
        valid.insert(
            n.into(),
            match cat.validate(&host, n) {
                Ok(()) => json!("ok"),
                Err(e) => err(&e),
            },
        );
    }
    out.insert("validate".into(), Value::Object(valid));
    out.insert(
        "replay_only_examples".into(),
        json!(
            cat.replay_only
                .iter()
                .filter(|n| n.starts_with("sm__"))
                .take(8)
                .collect::<Vec<_>>()
        ),
    );

    // Image size per sample, pass counts, interval acceptance.
    let sets: [&[&str]; 4] = [
        &NAMES[0..1],
        &[NAMES[0], NAMES[6]],
        &[NAMES[0], NAMES[6], NAMES[3], NAMES[7]],
        &[
            NAMES[0], NAMES[1], NAMES[2], NAMES[6], NAMES[3], NAMES[7], NAMES[9], NAMES[11],
        ],
    ];
    let mut sampler = PmSampler::enable(&cupti, args.device)?;
    let mut sizes = Vec::new();
    for set in sets {
        let names: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        let config = match host.config_image(&cupti, &names) {
            Ok(c) => c,
            Err(e) => {
                sizes.push(json!({"metrics": names, "config_error": err(&e)}));
                continue;
            }
        };
        let set_cfg = sampler.set_config(&config, 64 << 20, 100_000);
        let mut list = MetricList::new(&names)?;
        let a = sampler.counter_data_size(&mut list, 100);
        let b = sampler.counter_data_size(&mut list, 1100);
        let per = match (&a, &b) {
            (Ok(a), Ok(b)) => json!((*b as f64 - *a as f64) / 1000.0),
            _ => Value::Null,
        };
        sizes.push(json!({
            "metrics": names,
            "config_bytes": config.len(),
            "set_config": set_cfg.as_ref().map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string()),
            "bytes_100": a.ok(), "bytes_1100": b.ok(), "bytes_per_sample": per,
        }));
    }
    out.insert("image_sizes".into(), json!(sizes));
    let one: Vec<String> = vec![NAMES[0].to_string(), NAMES[6].to_string()];
    let config = host.config_image(&cupti, &one)?;
    let mut intervals = serde_json::Map::new();
    for ns in [50u64, 100, 250, 500, 1000, 2000, 5000, 10_000] {
        let r = sampler.set_config(&config, 64 << 20, ns);
        intervals.insert(
            ns.to_string(),
            match r {
                Ok(()) => json!("accepted"),
                Err(e) => err(&e),
            },
        );
    }
    out.insert("set_config_interval_ns".into(), Value::Object(intervals));
    sampler.set_config(&config, 512 << 20, 10_000)?;
    let mut list = MetricList::new(&one)?;
    let t = Instant::now();
    let img = sampler.counter_data(&mut list, 6000)?;
    let init_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut copy = img.clone();
    let t = Instant::now();
    copy.reset_from(&img);
    let reset_ms = t.elapsed().as_secs_f64() * 1e3;
    out.insert(
        "image_6000_samples".into(),
        json!({"bytes": img.size_bytes(), "initialize_ms": init_ms, "template_copy_ms": reset_ms}),
    );
    drop(sampler);

    // Does a decode call cost per sample decoded, or per byte of image? Same rate (20 us), three
    // image capacities, decoding every 2 ms and swapping at half full.
    let mut exp = Vec::new();
    for cap in [300u32, 3000, 9000] {
        let mut s = PmSampler::enable(&cupti, args.device)?;
        s.set_config(&config, 512 << 20, 20_000)?;
        let mut list = MetricList::new(&one)?;
        let blank = s.counter_data(&mut list, cap)?;
        let mut img = blank.clone();
        s.start()?;
        let t_end = Instant::now() + Duration::from_millis(400);
        let (mut calls, mut dec, mut samples, mut full) = (0u64, Duration::ZERO, 0usize, 0u64);
        let mut info_time = Duration::ZERO;
        while Instant::now() < t_end {
            std::thread::sleep(Duration::from_millis(2));
            let t = Instant::now();
            let o = s.decode(&mut img);
            dec += t.elapsed();
            calls += 1;
            if let Ok(o) = o
                && o.stop == DecodeStop::CounterDataFull
            {
                full += 1;
            }
            let t = Instant::now();
            let info = img.info()?;
            info_time += t.elapsed();
            if info.populated * 2 >= cap as usize {
                samples += info.completed;
                img.reset_from(&blank);
            }
        }
        s.stop()?;
        samples += img.info()?.completed;
        exp.push(json!({
            "capacity": cap, "image_bytes": blank.size_bytes(), "calls": calls, "samples": samples,
            "counter_data_full": full,
            "decode_ms_per_call": dec.as_secs_f64() * 1e3 / calls.max(1) as f64,
            "decode_us_per_sample": dec.as_secs_f64() * 1e6 / samples.max(1) as f64,
            "info_us_per_call": info_time.as_secs_f64() * 1e6 / calls.max(1) as f64,
        }));
    }
    out.insert("decode_cost_at_20us".into(), json!(exp));
    println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
    Ok(0)
}
