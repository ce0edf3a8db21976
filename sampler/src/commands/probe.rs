//! `cufall probe-sampler` (hidden): measures what the docs and the pipeline rely on, on the GPU
//! at hand, and prints it as JSON: metric catalogue facts, counter-data image size per sample,
//! the intervals CUPTI accepts, the cost of initialising and resetting images.

use cufall_cupti::host::MetricList;
use cufall_cupti::metric::{Catalogue, MetricName};
use cufall_cupti::{BlankImage, Cupti, CuptiError, DecodeStop, HostKind, PmSampler, ProfilerHost};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, clap::Args)]
pub struct ProbeArgs {
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Only the image-reuse experiment: start it while a matmul load runs that ends within 3 s.
    #[arg(long)]
    pub reuse_test: bool,
    /// Only the cost experiments behind the sampler's cost model: bytes per sample of single
    /// metrics, decode cost per byte and per call, timestamps, evaluation by sample index and
    /// by the image size passed.
    #[arg(long)]
    pub cost: bool,
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

/// Image sizes per metric set, the intervals the sampler accepts, and what a 6000-sample image
/// costs to set up and to restore.
fn image_probe(ctx: &Ctx<'_>, out: &mut serde_json::Map<String, Value>) -> anyhow::Result<()> {
    let sets: [&[&str]; 4] = [
        &NAMES[0..1],
        &[NAMES[0], NAMES[6]],
        &[NAMES[0], NAMES[6], NAMES[3], NAMES[7]],
        &[
            NAMES[0], NAMES[1], NAMES[2], NAMES[6], NAMES[3], NAMES[7], NAMES[9], NAMES[11],
        ],
    ];
    let mut sampler = PmSampler::enable(ctx.cupti, ctx.device)?;
    let mut sizes = Vec::new();
    for set in sets {
        let names: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        let config = match ctx.host.config_image(ctx.cupti, &names) {
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
    let config = ctx.host.config_image(ctx.cupti, &one)?;
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
    let layout = sampler.image_layout(&mut list)?;
    let blank = BlankImage::new(img, layout);
    let t = Instant::now();
    let mut fresh = blank.new_image();
    let new_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    blank.restore(&mut fresh, None);
    let restore_ms = t.elapsed().as_secs_f64() * 1e3;
    out.insert(
        "image_6000_samples".into(),
        json!({
            "bytes": blank.size_bytes(), "initialize_ms": init_ms,
            "layout": layout.map(|l| json!({"header_bytes": l.header_bytes, "bytes_per_sample": l.bytes_per_sample})),
            "blank_kept_bytes": blank.kept_bytes(), "blank_periodic": blank.is_periodic(),
            "new_lazy_image_ms": new_ms, "whole_restore_ms": restore_ms,
        }),
    );
    Ok(())
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
    let ctx = Ctx {
        cupti: &cupti,
        device: args.device,
        chip: &chip,
        avail: &avail,
        host: &host,
    };
    if args.cost {
        out.insert("cost".into(), cost_probe(&ctx)?);
        println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
        return Ok(0);
    }
    if args.reuse_test {
        let names = vec![NAMES[0].to_string(), NAMES[6].to_string()];
        out.insert("reuse_test".into(), reuse_test(&ctx, &names)?);
        println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
        return Ok(0);
    }
    catalogue_probe(&ctx, &mut out)?;
    image_probe(&ctx, &mut out)?;
    let one: Vec<String> = vec![NAMES[0].to_string(), NAMES[6].to_string()];

    // Where decode writes, and what evaluation costs, at 40 us with the default metrics.
    out.insert(
        "layout_and_eval_at_40us".into(),
        json!(
            [6000u32, 600]
                .iter()
                .map(|&cap| layout_and_eval(&ctx, &one, cap)
                    .unwrap_or_else(|e| json!({"capacity": cap, "error": e.to_string()})))
                .collect::<Vec<_>>()
        ),
    );

    // What decode costs per sample, by metric set, at 40 us (one image holds the whole run).
    let sets: [&[&str]; 5] = [
        &[NAMES[0]],
        &[NAMES[6]],
        &[NAMES[0], NAMES[6]],
        &[NAMES[0], NAMES[1], NAMES[2], NAMES[6]],
        &[NAMES[7]],
    ];
    let mut exp = Vec::new();
    for set in sets {
        let names: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        exp.push(
            decode_cost(&ctx, &names, Duration::from_millis(2), 512 << 20)
                .unwrap_or_else(|e| json!({"metrics": names, "error": e.to_string()})),
        );
    }
    out.insert("decode_cost_at_40us".into(), json!(exp));

    // Is there a cost per decode call (then decoding less often is cheaper)? Does the hardware
    // buffer's size matter?
    let mut exp = Vec::new();
    for (ms, mib) in [(2u64, 512usize), (10, 512), (25, 512), (50, 512), (25, 64)] {
        exp.push(
            decode_cost(&ctx, &one, Duration::from_millis(ms), mib << 20)
                .unwrap_or_else(|e| json!({"period_ms": ms, "error": e.to_string()})),
        );
    }
    out.insert("decode_cost_by_period_at_40us".into(), json!(exp));
    println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
    Ok(0)
}

/// The metric catalogue: base metric counts, the sub-metrics of the metrics cufall relies on,
/// which of them validate for PM sampling, and examples of replay-only metrics.
fn catalogue_probe(ctx: &Ctx<'_>, out: &mut serde_json::Map<String, Value>) -> anyhow::Result<()> {
    let range = ProfilerHost::new(ctx.cupti, HostKind::RangeProfiler, ctx.chip, None).ok();
    let all = ctx.host.all_base_metrics()?;
    out.insert("pm_base_metrics".into(), json!(all.len()));
    if let Some(r) = &range {
        out.insert(
            "range_profiler_base_metrics".into(),
            json!(r.all_base_metrics().map(|v| v.len()).unwrap_or(0)),
        );
    }
    out.insert(
        "max_metrics_per_pass".into(),
        json!(ctx.host.max_metrics_per_pass().ok()),
    );
    let cat = Catalogue::read(ctx.host, range.as_ref())?;
    let mut subs = serde_json::Map::new();
    for base in [
        "sm__pipe_tensor_cycles_active",
        "dram__throughput",
        "gr__cycles_elapsed",
        "sm__cycles_elapsed",
    ] {
        if let Some(k) = cat.bases.get(base) {
            let p = ctx.host.properties(base).ok();
            subs.insert(
                base.into(),
                json!({
                    "kind": k.as_str(),
                    "sub_metrics": ctx.host.sub_metrics(base, *k).unwrap_or_default(),
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
            match cat.validate(ctx.host, n) {
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

    Ok(())
}

/// What every probe experiment needs: the library, the device and its profiler host.
struct Ctx<'a> {
    cupti: &'a Cupti,
    device: usize,
    chip: &'a str,
    avail: &'a [u8],
    host: &'a ProfilerHost,
}

impl Ctx<'_> {
    /// PM sampling of `names` configured at `interval_ns`, with the metric list.
    fn configured(
        &self,
        names: &[String],
        hw_buffer_bytes: usize,
        interval_ns: u64,
    ) -> anyhow::Result<(PmSampler, MetricList)> {
        let config = self.host.config_image(self.cupti, names)?;
        let mut s = PmSampler::enable(self.cupti, self.device)?;
        s.set_config(&config, hw_buffer_bytes, interval_ns)?;
        Ok((s, MetricList::new(names)?))
    }

    /// A profiler host of its own (for evaluation) with `list` added.
    fn evaluator(&self, list: &mut MetricList) -> anyhow::Result<ProfilerHost> {
        let mut h = ProfilerHost::new(
            self.cupti,
            HostKind::PmSampling,
            self.chip,
            Some(self.avail.to_vec()),
        )?;
        h.add_metrics(list)?;
        Ok(h)
    }
}

/// Decodes ~120 ms at 40 us into an image of `cap` samples, reports where the image differs from
/// blank (against the prefix cufall restores) and what evaluation costs per sample.
fn layout_and_eval(ctx: &Ctx, names: &[String], cap: u32) -> anyhow::Result<Value> {
    let (mut s, mut list) = ctx.configured(names, 512 << 20, 40_000)?;
    let blank = s.blank_image(&mut list, cap)?;
    let mut img = blank.new_image();
    s.start()?;
    let t_end = Instant::now() + Duration::from_millis(cap as u64 * 40 / 1000 / 2);
    while Instant::now() < t_end {
        std::thread::sleep(Duration::from_millis(2));
        s.decode(&mut img)?;
    }
    s.stop()?;
    let o = s.decode(&mut img)?;
    let info = img.info()?;
    let prefix = blank.layout().map(|l| l.prefix_bytes(info.populated));
    let beyond = prefix.and_then(|p| blank.first_difference_after(&img, p));
    let ranges = blank.differing_ranges(&img, 256, 12);
    let mut eval = serde_json::Map::new();
    let h = ctx.evaluator(&mut list)?;
    let subsets: Vec<Vec<String>> = vec![
        names.to_vec(),
        names.iter().take(1).cloned().collect(),
        names.iter().skip(1).take(1).cloned().collect(),
    ];
    for sub in subsets.into_iter().filter(|v| !v.is_empty()) {
        let mut l = MetricList::new(&sub)?;
        let mut values = vec![0.0; sub.len()];
        let t = Instant::now();
        let mut ok = 0usize;
        for i in 0..info.completed {
            if h.evaluate(img.bytes(), i, &mut l, &mut values).is_ok() {
                ok += 1;
            }
        }
        eval.insert(
            sub.join(" + "),
            json!({"us_per_sample": t.elapsed().as_secs_f64() * 1e6 / info.completed.max(1) as f64, "ok": ok}),
        );
    }
    let t = Instant::now();
    let restored = blank.restore(&mut img, Some(info.populated));
    let restore_ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(json!({
        "capacity": cap, "image_bytes": blank.size_bytes(), "populated": info.populated,
        "completed": info.completed, "last_stop": format!("{:?}", o.stop),
        "restored_prefix_bytes": prefix, "first_difference_beyond_prefix": beyond,
        "differing_ranges": ranges, "prefix_restore_ms": restore_ms, "prefix_restore_bytes": restored,
        "blank_after_restore": blank.first_difference_after(&img, 0).is_none(),
        "evaluate": Value::Object(eval),
    }))
}

/// Samples `names` at 40 us for 300 ms, decoding every 2 ms into one image; CPU per sample.
fn decode_cost(
    ctx: &Ctx,
    names: &[String],
    period: Duration,
    hw_buffer_bytes: usize,
) -> anyhow::Result<Value> {
    let (mut s, mut list) = ctx.configured(names, hw_buffer_bytes, 40_000)?;
    let blank = s.blank_image(&mut list, 9_000)?;
    let mut img = blank.new_image();
    s.start()?;
    let t_end = Instant::now() + Duration::from_millis(300);
    let (mut calls, mut dec, mut full) = (0u64, Duration::ZERO, 0u64);
    while Instant::now() < t_end {
        std::thread::sleep(period);
        let t = Instant::now();
        let o = s.decode(&mut img);
        dec += t.elapsed();
        calls += 1;
        if let Ok(o) = o
            && o.stop == DecodeStop::CounterDataFull
        {
            full += 1;
        }
    }
    s.stop()?;
    let samples = img.info()?.completed;
    Ok(json!({
        "metrics": names, "bytes_per_sample": blank.layout().map(|l| l.bytes_per_sample),
        "period_ms": period.as_secs_f64() * 1e3, "hw_buffer_mib": hw_buffer_bytes >> 20,
        "calls": calls, "samples": samples, "counter_data_full": full,
        "decode_us_per_sample": dec.as_secs_f64() * 1e6 / samples.max(1) as f64,
        "decode_ms_per_call": dec.as_secs_f64() * 1e3 / calls.max(1) as f64,
    }))
}

/// Does decode overwrite a sample slot, or depend on its previous (blank) contents? Decodes
/// ~150 ms of a busy GPU into an image, restores only the image header, waits for the GPU to go
/// idle, and decodes ~150 ms into the same (dirty) slots; then the same into a properly blank
/// image. If decode only overwrote, the idle samples read the same from both.
fn reuse_test(ctx: &Ctx, names: &[String]) -> anyhow::Result<Value> {
    let (mut s, mut list) = ctx.configured(names, 512 << 20, 40_000)?;
    let blank = s.blank_image(&mut list, 6_000)?;
    anyhow::ensure!(blank.layout().is_some(), "no linear image layout");
    let h = ctx.evaluator(&mut list)?;
    let mut stats = |img: &cufall_cupti::CounterData| -> anyhow::Result<Value> {
        let info = img.info()?;
        let mut v = vec![0.0; names.len()];
        let (mut sum, mut max) = (vec![0.0; names.len()], vec![f64::MIN; names.len()]);
        let mut n = 0usize;
        for i in 1..info.completed {
            h.evaluate(img.bytes(), i, &mut list, &mut v)?;
            for k in 0..v.len() {
                sum[k] += v[k];
                max[k] = max[k].max(v[k]);
            }
            n += 1;
        }
        Ok(
            json!({"samples": n, "mean": sum.iter().map(|x| x / n.max(1) as f64).collect::<Vec<_>>(), "max": max}),
        )
    };
    let decode_for = |s: &mut PmSampler, img: &mut cufall_cupti::CounterData, ms: u64| {
        let end = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(2));
            let _ = s.decode(img);
        }
    };
    let mut img = blank.new_image();
    s.start()?;
    decode_for(&mut s, &mut img, 150);
    let busy = stats(&img)?;
    let populated = img.info()?.populated;
    // The header (and slot 0) restored; slots 1.. keep the busy samples' bytes.
    let mut dirty = img;
    blank.restore(&mut dirty, Some(0));
    // Wait for the load to end (the caller starts a load that ends within ~3 s), draining
    // samples into a scratch image.
    let mut scratch = blank.new_image();
    decode_for(&mut s, &mut scratch, 3_000);
    decode_for(&mut s, &mut dirty, 150);
    let idle_dirty = stats(&dirty)?;
    let dirty_populated = dirty.info()?.populated;
    let mut clean = blank.new_image();
    decode_for(&mut s, &mut clean, 150);
    let idle_clean = stats(&clean)?;
    s.stop()?;
    Ok(json!({
        "metrics": names, "busy": busy, "busy_populated": populated,
        "idle_into_dirty_slots": idle_dirty, "dirty_populated": dirty_populated,
        "idle_into_blank_slots": idle_clean,
    }))
}

/// Single metrics whose counter-data bytes per sample the cost model is checked on.
const COST_SINGLES: [&str; 16] = [
    "sm__pipe_tensor_cycles_active.avg",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.peak_sustained",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gr__cycles_elapsed.max",
    "gpc__cycles_elapsed.max",
    "sm__cycles_elapsed.avg",
    "sm__cycles_elapsed.max",
    "sm__cycles_active.avg",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_elapsed",
    "lts__t_bytes.sum",
    "dram__bytes_read.sum",
    "pcie__read_bytes.sum",
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
];

/// The cost model's inputs, measured: bytes per sample of single metrics (with and without a
/// configuration set first, and what one size query costs), then for four metric sets at 10 µs:
/// one decode call over a 150 ms backlog (cost per sample and per byte), decode calls every 2 ms
/// (cost per call), timestamps per sample, and evaluation per sample by index and by the image
/// size passed to CUPTI.
fn cost_probe(ctx: &Ctx<'_>) -> anyhow::Result<Value> {
    let mut out = serde_json::Map::new();
    // The metric sets first (evaluation's cost is what is least known), then single metrics.
    let sets: [&[&str]; 6] = [
        &[NAMES[6]],
        &[NAMES[0]],
        &[NAMES[0], NAMES[6]],
        &[NAMES[7]],
        &[crate::metric_spec::DEFAULT_TENSOR],
        &[crate::metric_spec::DEFAULT_TENSOR, NAMES[6]],
    ];
    let mut rows = Vec::new();
    for set in sets {
        let names: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        // Each result goes to stderr at once: should CUPTI crash the probe later, the log still
        // holds what was measured before.
        eprintln!("cost probe: measuring {}", names.join(" + "));
        let row = cost_set(ctx, &names)
            .unwrap_or_else(|e| json!({"metrics": names, "error": e.to_string()}));
        eprintln!("cost probe: {row}");
        rows.push(row);
    }
    out.insert("sets_at_10us".into(), json!(rows));
    // Bytes per sample of single metrics, each configured first as the recorder does (a first
    // version of this probe asked an unconfigured object and died of SIGSEGV on the H200 before
    // printing anything; where exactly was not found), and what configuring and asking cost.
    let mut fresh = PmSampler::enable(ctx.cupti, ctx.device)?;
    let range = ProfilerHost::new(ctx.cupti, HostKind::RangeProfiler, ctx.chip, None).ok();
    let cat = Catalogue::read(ctx.host, range.as_ref())?;
    let mut singles = Vec::new();
    for n in COST_SINGLES {
        eprintln!("cost probe: bytes of {n}");
        let names = vec![n.to_string()];
        if let Err(e) = cat.validate(ctx.host, n) {
            singles.push(json!({"metric": n, "error": err(&e)}));
            continue;
        }
        let t = Instant::now();
        let configured = ctx
            .host
            .config_image(ctx.cupti, &names)
            .and_then(|c| fresh.set_config(&c, 128 << 20, 100_000));
        let config_ms = t.elapsed().as_secs_f64() * 1e3;
        if let Err(e) = configured {
            singles.push(json!({"metric": n, "error": err(&e)}));
            continue;
        }
        let mut list = MetricList::new(&names)?;
        let t = Instant::now();
        let a = fresh.counter_data_size(&mut list, 1000);
        let b = fresh.counter_data_size(&mut list, 2000);
        let us = t.elapsed().as_secs_f64() * 1e6 / 2.0;
        singles.push(match (a, b) {
            (Ok(a), Ok(b)) => json!({"metric": n, "bytes_per_sample": b.saturating_sub(a) / 1000,
                "header_bytes": a.saturating_sub(b.saturating_sub(a)), "size_query_us": us,
                "config_ms": config_ms}),
            (Err(e), _) | (_, Err(e)) => json!({"metric": n, "error": err(&e)}),
        });
    }
    drop(fresh);
    out.insert("bytes_of_single_metrics".into(), json!(singles));
    Ok(Value::Object(out))
}

fn cost_set(ctx: &Ctx<'_>, names: &[String]) -> anyhow::Result<Value> {
    const CAP: u32 = 24_000;
    let (mut s, mut list) = ctx.configured(names, 512 << 20, 10_000)?;
    eprintln!("cost probe:   configured; image layout");
    let layout = s.image_layout(&mut list)?;
    eprintln!("cost probe:   blank image");
    let blank = s.blank_image(&mut list, CAP)?;
    // Decoding while sampling runs, a call every 25 ms as the recorder calls, for 150 ms: the
    // decoder's cost per sample (a single call over a 150 ms backlog after the stop died of
    // SIGSEGV inside CUPTI on the H200, 2026-12-03).
    let mut img = blank.new_image();
    s.start()?;
    eprintln!("cost probe:   decode while sampling");
    let end = Instant::now() + Duration::from_millis(150);
    let mut spent = Duration::ZERO;
    let mut o = None;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(25));
        let t = Instant::now();
        o = Some(s.decode(&mut img)?);
        spent += t.elapsed();
    }
    s.stop()?;
    let o = o.ok_or_else(|| anyhow::anyhow!("no decode call was made"))?;
    let backlog_s = spent.as_secs_f64();
    let info = img.info()?;
    let n = info.completed.max(1);
    // Timestamps, per sample.
    let t = Instant::now();
    for i in 0..info.completed {
        let _ = s.sample_times(&img, i);
    }
    let times_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    // Evaluation: the first and the last 2,000 samples with the whole image, then the first
    // 2,000 with only the bytes up to each sample.
    eprintln!("cost probe:   evaluation");
    let h = ctx.evaluator(&mut list)?;
    let mut values = vec![0.0; names.len()];
    let k = info.completed.min(2_000);
    let mut eval = |range: std::ops::Range<usize>, sliced: bool| -> Value {
        let t = Instant::now();
        let mut ok = 0usize;
        let mut first_err = None;
        for i in range.clone() {
            let bytes = match (sliced, layout) {
                (true, Some(l)) => &img.bytes()[..l.prefix_bytes(i + 1).min(img.bytes().len())],
                _ => img.bytes(),
            };
            match h.evaluate(bytes, i, &mut list, &mut values) {
                Ok(()) => ok += 1,
                Err(e) => {
                    first_err.get_or_insert(e.to_string());
                }
            }
        }
        json!({"us_per_sample": t.elapsed().as_secs_f64() * 1e6 / range.len().max(1) as f64,
            "ok": ok, "error": first_err, "last_values": values.clone()})
    };
    let first = eval(0..k, false);
    let last = eval(info.completed - k..info.completed, false);
    let sliced = eval(0..k, true);
    // Each metric alone, to see whether one call for two metrics is cheaper than two calls.
    let mut alone = serde_json::Map::new();
    if names.len() > 1 {
        for m in names {
            let one = vec![m.clone()];
            let mut l = MetricList::new(&one)?;
            let mut v = vec![0.0];
            let t = Instant::now();
            for i in 0..k {
                let _ = h.evaluate(img.bytes(), i, &mut l, &mut v);
            }
            alone.insert(
                m.clone(),
                json!(t.elapsed().as_secs_f64() * 1e6 / k.max(1) as f64),
            );
        }
    }
    eprintln!("cost probe:   plain rollups");
    let rollups = plain_rollups(ctx, names, img.bytes(), k);
    // Calls every 2 ms: what a call costs beyond its samples.
    let mut img2 = blank.new_image();
    s.start()?;
    let end = Instant::now() + Duration::from_millis(100);
    let (mut calls, mut spent) = (0u32, Duration::ZERO);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2));
        let t = Instant::now();
        let _ = s.decode(&mut img2);
        spent += t.elapsed();
        calls += 1;
    }
    s.stop()?;
    let small = img2.info()?.completed;
    let per_sample_s = backlog_s / n as f64;
    let per_call_ms =
        (spent.as_secs_f64() - per_sample_s * small as f64) * 1e3 / f64::from(calls.max(1));
    let bytes = layout.map(|l| l.bytes_per_sample);
    Ok(json!({
        "metrics": names, "bytes_per_sample": bytes, "header_bytes": layout.map(|l| l.header_bytes),
        "backlog_samples": info.completed, "backlog_stop": format!("{:?}", o.stop),
        "decode_us_per_sample": per_sample_s * 1e6,
        "decode_ns_per_byte": bytes.map(|b| per_sample_s * 1e9 / b as f64),
        "small_calls": calls, "small_call_samples": small, "decode_ms_per_call_overhead": per_call_ms,
        "sample_times_us_per_sample": times_us,
        "evaluate_first_2000": first, "evaluate_last_2000": last, "evaluate_first_2000_sliced": sliced,
        "evaluate_each_metric_alone_us": Value::Object(alone),
        "evaluate_plain_rollups": rollups,
    }))
}

/// Where evaluation goes: the first `k` samples of `image` evaluated as the base counters'
/// plain rollups (each on a host of its own), to set beside the percentages recorded.
fn plain_rollups(ctx: &Ctx<'_>, names: &[String], image: &[u8], k: usize) -> Value {
    let mut rollups = serde_json::Map::new();
    for m in names {
        let base = MetricName::parse(m).base;
        for r in ["sum", "avg"] {
            let v = format!("{base}.{r}");
            let one = vec![v.clone()];
            let got = MetricList::new(&one)
                .map_err(anyhow::Error::from)
                .and_then(|mut l| {
                    let h = ctx.evaluator(&mut l)?;
                    let mut out = vec![0.0];
                    let t = Instant::now();
                    let mut ok = 0usize;
                    for i in 0..k {
                        ok += usize::from(h.evaluate(image, i, &mut l, &mut out).is_ok());
                    }
                    Ok(
                        json!({"us_per_sample": t.elapsed().as_secs_f64() * 1e6 / k.max(1) as f64,
                        "ok": ok, "last": out[0]}),
                    )
                });
            rollups.insert(v, got.unwrap_or_else(|e| json!({"error": e.to_string()})));
        }
    }
    Value::Object(rollups)
}
