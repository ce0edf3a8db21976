//! The decode state machine and the evaluators, driven by a scripted fake GPU (no CUDA needed).
//!
//! The fake behaves as CUPTI did on an H200: samples wait in a hardware buffer until decoded;
//! samples that do not fit the image are gone when decode stops with `COUNTER_DATA_FULL`; an
//! overflow makes decode fail and loses what the hardware buffer held until re-armed; the first
//! sample after every start is a warm-up sample. Every test checks the pipeline's accounting:
//! each sample the fake GPU produced is either kept or counted in exactly one drop record, and
//! every chunk's sequence number reaches the sink exactly once. The fake lives in `common/`,
//! shared with the exporter's tests.

mod common;

use common::{Eval, Fake, IV, Step, T0, run_fake};
use cufall_sampler::pipeline::{DeviceCounters, PipelineError};
use cufall_sampler::session::DeviceReport;
use cufall_sampler::sink::{SinkMsg, SinkShared, sink_main};
use cufall_trace::model::{DeviceId, DropRecord};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

struct Outcome {
    result: Result<(), PipelineError>,
    generated: u64,
    /// (sample number, value) of every kept sample.
    kept: Vec<(u64, f64)>,
    drops: Vec<DropRecord>,
    messages: Vec<String>,
    seqs: Vec<u64>,
    counters: Arc<DeviceCounters>,
}

impl Outcome {
    fn lost(&self, reason: &str) -> u64 {
        self.drops
            .iter()
            .filter(|d| d.reason.as_str() == reason)
            .map(|d| d.lost_samples.unwrap_or(0))
            .sum()
    }

    fn records(&self, reason: &str) -> usize {
        self.drops
            .iter()
            .filter(|d| d.reason.as_str() == reason)
            .count()
    }

    fn report(&self) -> DeviceReport {
        DeviceReport::from_counters(DeviceId(0), &self.counters)
    }

    /// Every produced sample is kept or in exactly one drop record; every value belongs to its
    /// sample; every sequence number came once.
    fn assert_accounted(&self) {
        let in_drops: u64 = self.drops.iter().map(|d| d.lost_samples.unwrap_or(0)).sum();
        assert_eq!(
            self.kept.len() as u64 + in_drops,
            self.generated,
            "kept {} + dropped {in_drops} != produced {}; drops: {:?}",
            self.kept.len(),
            self.generated,
            self.drops
        );
        for (k, v) in &self.kept {
            assert_eq!(*k as f64, *v, "a value landed on the wrong sample");
        }
        let mut seen = self.kept.iter().map(|k| k.0).collect::<Vec<_>>();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), self.kept.len(), "a sample was kept twice");
        let mut seqs = self.seqs.clone();
        seqs.sort_unstable();
        assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    }
}

fn drive(script: Vec<Step>, capacity: u32, eval: Eval, evaluators: usize) -> Outcome {
    drive_draining(script, capacity, eval, evaluators, usize::MAX)
}

fn drive_draining(
    script: Vec<Step>,
    capacity: u32,
    eval: Eval,
    evaluators: usize,
    drain_per_call: usize,
) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(DeviceCounters::default());
    let generated = Arc::new(AtomicU64::new(0));
    let result = run_fake(
        Fake {
            script,
            capacity,
            eval,
            evaluators,
            drain_per_call,
        },
        DeviceId(0),
        &tx,
        &stop,
        &counters,
        &generated,
    );
    drop(tx);
    let mut o = Outcome {
        result,
        generated: generated.load(Ordering::Relaxed),
        kept: Vec::new(),
        drops: Vec::new(),
        messages: Vec::new(),
        seqs: Vec::new(),
        counters,
    };
    for m in rx.try_iter() {
        match m {
            SinkMsg::Samples { seq, batch, .. } => {
                o.seqs.push(seq);
                for (i, s) in batch.start_ns.iter().enumerate() {
                    o.kept.push((((*s as u64) - T0) / IV, batch.values[0][i]));
                }
            }
            SinkMsg::Drops(d) => o.drops.extend(d),
            SinkMsg::Message(m) => o.messages.push(m),
            _ => {}
        }
    }
    o
}

fn samples(n: usize, each: usize) -> Vec<Step> {
    vec![Step::Samples(each); n]
}

#[test]
fn a_steady_stream_is_kept_whole() {
    let o = drive(samples(10, 150), 1_000, Eval::Good, 2);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    assert_eq!(o.generated, 1_500);
    assert_eq!(o.kept.len(), 1_499);
    assert_eq!(o.records("warmup"), 1);
    assert_eq!(o.drops.len(), 1, "{:?}", o.drops);
    let r = o.report();
    assert_eq!(r.samples_decoded, 1_500);
    assert_eq!(r.samples_evaluated, 1_499);
    assert_eq!(r.images_sealed, 10);
    assert_eq!((r.counter_data_full, r.hw_overflows, r.restarts), (0, 0, 0));
    assert_eq!(r.max_samples_per_decode, 150);
    assert!(r.decode_by_call_size.iter().map(|b| b.samples).sum::<u64>() >= 1_500);
}

#[test]
fn slow_decode_calls_lose_nothing_and_are_measured() {
    let script = vec![Step::Slow(300, Duration::from_millis(60)); 4];
    let o = drive(script, 1_000, Eval::Good, 2);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    assert_eq!(o.kept.len(), 1_199);
    let r = o.report();
    assert!(r.max_decode_call_ms >= 60.0, "{}", r.max_decode_call_ms);
    assert!(r.late_decodes >= 1);
}

#[test]
fn a_full_image_loses_what_did_not_fit_and_says_so() {
    // 100-sample steps seal every call; then 700 samples reach a 500-sample image.
    let mut script = samples(3, 100);
    script.push(Step::Samples(700));
    script.extend(samples(3, 100));
    let o = drive(script, 500, Eval::Good, 2);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    assert_eq!(o.records("counter_data_full"), 1, "{:?}", o.drops);
    assert_eq!(o.lost("counter_data_full"), 200);
    assert_eq!(o.kept.len(), 1_300 - 200 - 1);
    assert_eq!(o.report().counter_data_full, 1);
}

#[test]
fn an_overflow_rearms_and_records_the_hole() {
    let mut script = samples(3, 150);
    script.push(Step::Overflow(80));
    script.extend(samples(3, 150));
    let o = drive(script, 1_000, Eval::Good, 2);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    let r = o.report();
    assert_eq!((r.hw_overflows, r.restarts), (1, 1));
    assert_eq!(o.records("hardware_buffer_overflow"), 1);
    assert_eq!(o.lost("hardware_buffer_overflow"), 80);
    assert_eq!(o.records("warmup"), 2, "one warm-up per start");
    assert_eq!(o.kept.len(), 900 - 2);
    assert!(o.messages.iter().any(|m| m.contains("overflowed")));
}

#[test]
fn decode_errors_are_counted_and_lose_nothing() {
    let mut script = samples(2, 150);
    script.extend(vec![Step::Error(50); 3]);
    script.extend(samples(2, 150));
    let o = drive(script, 1_000, Eval::Good, 2);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    assert_eq!(o.report().decode_errors, 3);
    assert_eq!(o.kept.len(), 750 - 1);
}

#[test]
fn decode_that_keeps_failing_ends_the_device_with_its_cause() {
    let mut script = samples(2, 150);
    script.extend(vec![Step::Error(10); 25]);
    let o = drive(script, 1_000, Eval::Good, 2);
    let e = o.result.as_ref().unwrap_err();
    assert!(
        matches!(e, PipelineError::DecodeKeepsFailing { count: 20, .. }),
        "{e}"
    );
    let text = cufall_sampler::pipeline::error_chain(e);
    assert!(
        text.contains("GPU 0: PM sampling decode failed 20 times in a row"),
        "{text}"
    );
    // What was decoded before is all there; what the hardware still held is a drop record.
    assert_eq!(o.kept.len(), 299);
    o.assert_accounted();
    assert_eq!(o.lost("decode_error"), 200);
}

#[test]
fn a_stop_in_the_middle_of_an_image_keeps_its_samples() {
    // 30-sample steps never reach the 100-sample seal point before the stop.
    let mut script = samples(2, 30);
    script.push(Step::StopDuring(30));
    let o = drive(script, 1_000, Eval::Good, 2);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    assert_eq!(o.kept.len(), 89);
    assert_eq!(o.report().images_sealed, 1);
}

#[test]
fn a_program_exiting_while_decode_lags_is_drained() {
    // The decoder moves only part of each call's samples; the backlog (1,560 samples) is
    // drained after Stop, 500 samples a call.
    let mut script = vec![Step::Lag(400, 10); 3];
    script.push(Step::StopLagging(400, 10));
    let o = drive_draining(script, 5_000, Eval::Good, 2, 500);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    assert_eq!(o.generated, 1_600);
    assert_eq!(o.kept.len(), 1_599);
    assert!(
        o.report().decode_calls >= 4 + 4,
        "drained over several calls"
    );
}

#[test]
fn a_backlog_larger_than_the_image_at_stop_is_recorded() {
    let mut script = vec![Step::Lag(400, 10); 3];
    script.push(Step::StopLagging(400, 10));
    let o = drive(script, 500, Eval::Good, 2);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    assert!(o.lost("counter_data_full") > 0, "{:?}", o.drops);
}

#[test]
fn a_fault_at_every_step_loses_nothing_silently() {
    let base = samples(6, 120);
    let faults = [
        Step::Error(30),
        Step::Overflow(40),
        Step::Samples(900),
        Step::Lag(300, 5),
        Step::Slow(50, Duration::from_millis(3)),
        Step::StopDuring(10),
    ];
    for at in 0..=base.len() {
        for f in &faults {
            let mut script = base.clone();
            script.insert(at, f.clone());
            let o = drive(script, 600, Eval::Good, 2);
            o.result.as_ref().unwrap();
            o.assert_accounted();
        }
    }
}

#[test]
fn samples_cupti_refuses_to_evaluate_are_decode_error_drops() {
    let o = drive(samples(10, 150), 1_000, Eval::RefusesSome, 3);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    // Sample numbers 3, 13, ..., 1493: 150 of them.
    assert_eq!(o.records("decode_error"), 150);
    assert_eq!(o.report().eval_errors, 150);
    assert_eq!(o.kept.len(), 1_499 - 150);
}

#[test]
fn a_panicking_evaluator_turns_its_chunk_into_drops_and_the_device_goes_on() {
    let o = drive(samples(10, 150), 1_000, Eval::PanicsAt(400), 2);
    o.result.as_ref().unwrap();
    o.assert_accounted();
    let r = o.report();
    assert_eq!(r.eval_panics, 1);
    assert_eq!(o.records("evaluation_failed"), 1);
    let lost = o.lost("evaluation_failed");
    assert_eq!(lost, r.eval_failed_samples);
    assert!((1..=150).contains(&lost), "{lost}");
    assert!(
        o.messages
            .iter()
            .any(|m| m.contains("fake evaluator broke on sample 400")),
        "the cause reaches the user: {:?}",
        o.messages
    );
    // Later images were still evaluated.
    assert!(o.kept.iter().any(|k| k.0 > 1_400));
}

#[test]
fn evaluators_that_all_fail_end_their_device_and_the_other_gpu_goes_on() {
    let (tx, rx) = mpsc::channel();
    let shared = Arc::new(SinkShared::default());
    let sink = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || sink_main(rx, None, None, shared, None))
    };
    let run = |device: u32, eval: Eval, tx: Sender<SinkMsg>| {
        std::thread::spawn(move || {
            let stop = Arc::new(AtomicBool::new(false));
            let counters = Arc::new(DeviceCounters::default());
            let generated = Arc::new(AtomicU64::new(0));
            let fake = Fake {
                script: samples(30, 150),
                capacity: 1_000,
                eval,
                evaluators: 2,
                drain_per_call: usize::MAX,
            };
            let r = run_fake(fake, DeviceId(device), &tx, &stop, &counters, &generated);
            (r, counters, generated.load(Ordering::Relaxed))
        })
    };
    let bad = run(0, Eval::AlwaysPanics, tx.clone());
    let good = run(1, Eval::Good, tx);
    let (bad_r, bad_c, bad_gen) = bad.join().unwrap();
    let (good_r, _, good_gen) = good.join().unwrap();
    sink.join().unwrap();
    good_r.unwrap();
    let e = bad_r.unwrap_err();
    assert!(matches!(e, PipelineError::EvaluatorsGone { .. }), "{e}");
    assert!(
        e.to_string().contains("fake evaluator always breaks"),
        "{e}"
    );
    assert_eq!(bad_c.evaluators_alive.load(Ordering::Relaxed), 0);
    // GPU 1 is whole; GPU 0 kept nothing but lost nothing silently.
    assert_eq!(shared.samples_written.load(Ordering::Relaxed), good_gen - 1);
    let tally = shared.tally.lock().unwrap().clone();
    let by: BTreeMap<_, _> = tally.by_reason.into_iter().collect();
    let failed = by.get("evaluation_failed").map_or(0, |v| v.lost_samples);
    let warmups = by.get("warmup").map_or(0, |v| v.lost_samples);
    assert_eq!(failed + warmups, bad_gen + 1, "{by:?}");
    let msgs = shared.messages.lock().unwrap().clone();
    assert!(
        msgs.iter().any(|m| m.contains("evaluation panicked")),
        "{msgs:?}"
    );
    assert!(msgs.iter().any(|m| m.contains("stopped")), "{msgs:?}");
}

/// A recording paused and resumed (as `cufall control pause` pauses a `cufall record`): the
/// trace holds one `paused` drop for the GPU, no sample inside it, NVML rows through it, and
/// the sink counts nothing lost.
#[test]
fn a_recording_paused_and_resumed_holds_the_pause_in_its_trace() {
    use common::clocked::{self, FakeStarter, Switches};
    use cufall_sampler::pipeline::pause::{
        CounterState, Device, DeviceStarter, Pausable, PauseDone,
    };
    use cufall_trace::model::{DropReason, Manifest, SamplingInfo};
    use cufall_trace::{Trace, TraceWriter, WriterOptions};
    use std::time::Instant;

    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("paused.cufall");
    let mut m = Manifest::new("test", cufall_sampler::now_unix_ns());
    m.devices = vec![clocked::device_info(0)];
    m.sampling = Some(SamplingInfo {
        interval_ns: clocked::IV_NS,
        metrics: vec![clocked::metric_info()],
        source: "fake".into(),
    });
    let writer = TraceWriter::create(&path, m, WriterOptions::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let shared = Arc::new(SinkShared::default());
    let s = Arc::clone(&shared);
    let sink = std::thread::spawn(move || sink_main(rx, Some(writer), None, s, None));
    let nvml_stop = Arc::new(AtomicBool::new(false));
    let nvml = clocked::spawn_nvml(vec![0], tx.clone(), Arc::clone(&nvml_stop));
    let switches = Arc::new(Switches::default());
    let mut starter = FakeStarter {
        i: 0,
        switches: Arc::clone(&switches),
        out: tx.clone(),
        counters: Arc::new(DeviceCounters::default()),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let running = starter.start(Arc::clone(&stop)).unwrap();
    let p = Pausable::new(
        vec![Device {
            id: DeviceId(0),
            stop,
            running,
            starter: Box::new(starter),
        }],
        tx,
    )
    .unwrap();
    let c = Arc::clone(&p.control);
    std::thread::sleep(Duration::from_millis(300));
    assert!(matches!(
        c.pause(Duration::from_millis(400)),
        Ok(PauseDone::Released { devices: 1, .. })
    ));
    assert_eq!(switches.sources.load(Ordering::SeqCst), 0);
    let t0 = Instant::now();
    while c.state() != CounterState::Sampling {
        assert!(t0.elapsed() < Duration::from_secs(10), "no resume");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(p.stop().is_empty());
    nvml_stop.store(true, Ordering::SeqCst);
    nvml.join().unwrap();
    let writer = sink.join().unwrap().writer.unwrap();
    writer.finish(cufall_sampler::now_unix_ns()).unwrap();
    assert_eq!(shared.tally.lock().unwrap().losses().records, 0);

    let t = Trace::open(&path).unwrap();
    let drops = t.drops().unwrap();
    let paused: Vec<&DropRecord> = drops
        .iter()
        .filter(|d| d.reason == DropReason::Paused)
        .collect();
    assert_eq!(paused.len(), 1, "{drops:?}");
    let (from, to) = (paused[0].start_ns, paused[0].end_ns);
    assert!(to - from >= 400_000_000, "a pause of {} ns", to - from);
    let batches = t.sample_batches().unwrap();
    let starts: Vec<i64> = batches.iter().flat_map(|b| b.start_ns.clone()).collect();
    assert!(starts.iter().any(|&s| s < from) && starts.iter().any(|&s| s > to));
    assert!(!starts.iter().any(|&s| s > from && s < to));
    let nvml_inside = t
        .nvml()
        .unwrap()
        .iter()
        .filter(|r| r.t_ns > from && r.t_ns < to)
        .count();
    assert!(nvml_inside >= 20, "{nvml_inside} NVML rows in the pause");
}
