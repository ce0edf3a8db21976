//! GPU tests: run on a machine with an NVIDIA GPU and counter access (scripts/gpu/sampler.sh).
#![allow(clippy::unwrap_used)]

use cufall_cupti::host::MetricList;
use cufall_cupti::metric::Catalogue;
use cufall_cupti::{Cupti, CuptiError, DecodeStop, HostKind, PmSampler, ProfilerHost};
use std::time::{Duration, Instant};

const METRICS: [&str; 2] = [
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
];

fn names() -> Vec<String> {
    METRICS.iter().map(|s| s.to_string()).collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn catalogue_has_the_default_metrics_and_suggests() {
    let cupti = Cupti::init().unwrap();
    let chip = cupti.chip_name(0).unwrap();
    assert!(!chip.is_empty());
    let avail = cupti.pm_counter_availability(0).unwrap();
    let host = ProfilerHost::new(&cupti, HostKind::PmSampling, &chip, Some(avail)).unwrap();
    let range = ProfilerHost::new(&cupti, HostKind::RangeProfiler, &chip, None).ok();
    let cat = Catalogue::read(&host, range.as_ref()).unwrap();
    assert!(cat.bases.len() > 100, "{} base metrics", cat.bases.len());
    for m in METRICS {
        cat.validate(&host, m).unwrap();
    }
    match cat.validate(&host, "dram__thruput.avg.pct_of_peak_sustained_elapsed") {
        Err(CuptiError::UnknownMetric { suggestions, .. }) => {
            assert!(
                suggestions
                    .iter()
                    .any(|s| s.starts_with("dram__throughput")),
                "{suggestions:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        cupti.chip_name(999),
        Err(CuptiError::DeviceOutOfRange { .. })
    ));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn pm_sampling_yields_tiling_samples_with_sane_values() {
    let cupti = Cupti::init().unwrap();
    let chip = cupti.chip_name(0).unwrap();
    let avail = cupti.pm_counter_availability(0).unwrap();
    let mut host = ProfilerHost::new(&cupti, HostKind::PmSampling, &chip, Some(avail)).unwrap();
    let config = host.config_image(&cupti, &names()).unwrap();
    let mut list = MetricList::new(&names()).unwrap();
    host.add_metrics(&mut list).unwrap();
    let mut s = PmSampler::enable(&cupti, 0).unwrap();
    s.set_config(&config, 64 << 20, 100_000).unwrap();
    let mut img = s.counter_data(&mut list, 8_000).unwrap();
    s.start().unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        let o = s.decode(&mut img).unwrap();
        assert_ne!(o.stop, DecodeStop::CounterDataFull);
        std::thread::sleep(Duration::from_millis(5));
    }
    s.stop().unwrap();
    let _ = s.decode(&mut img).unwrap();
    let info = img.info().unwrap();
    assert!(info.completed > 1_000, "{info:?}");
    let mut prev_end = None;
    let mut worst_seam = 0i64;
    let mut values = vec![0.0; 2];
    for i in 1..info.completed {
        let (a, b) = s.sample_times(&img, i).unwrap();
        assert!(b > a);
        if let Some(p) = prev_end {
            worst_seam = worst_seam.max(a as i64 - p as i64);
        }
        prev_end = Some(b);
        host.evaluate(img.bytes(), i, &mut list, &mut values)
            .unwrap();
        for v in &values {
            assert!((-0.1..=100.5).contains(v), "sample {i}: {values:?}");
        }
    }
    assert!(
        worst_seam < 5_000,
        "largest seam between samples {worst_seam} ns"
    );
    // A new image from a BlankImage is blank; after a decode only the written prefix differs
    // from blank, and restoring that prefix makes the image blank again.
    let blank = s.blank_image(&mut list, 8_000).unwrap();
    let layout = blank
        .layout()
        .expect("image size grows linearly per sample");
    assert_eq!(blank.new_image().info().unwrap().populated, 0);
    assert_eq!(
        blank.first_difference_after(&img, layout.prefix_bytes(info.populated)),
        None
    );
    let mut used = img;
    blank.restore(&mut used, Some(info.populated));
    assert_eq!(used.info().unwrap().populated, 0);
    assert_eq!(blank.first_difference_after(&used, 0), None);
}
