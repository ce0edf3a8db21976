//! What sampling a metric set costs, from the counter-data bytes of one sample.
//!
//! CUPTI's decoder and evaluator do not cost "per metric": they cost by the counter data a
//! sample carries (`cuptiPmSamplingGetCounterDataSize`), which differs 1,000-fold between
//! metrics (313 bytes for `gr__cycles_elapsed.max`, 4,729 for the DRAM throughput, 20,825 for
//! the tensor pipe's % of peak, 649,017 for `sm__throughput`). The recorder learns the bytes per
//! sample of the metrics asked for before it picks an interval, and this model turns bytes,
//! metric count and interval into:
//!
//! - how busy the one decode thread a GPU allows would be (it must keep up, or samples are lost:
//!   the hardware delivers them whether or not they are decoded),
//! - the CPU of the whole pipeline per GPU (decode, timestamps and holes, evaluation, restoring
//!   used image slots),
//! - the finest interval the decoder holds without loss, and the default interval: the finest
//!   one that costs at most [`CORE_BUDGET`] per GPU.
//!
//! [`CostModel::choose_interval`] is the one place a session's interval is chosen: the one
//! given, the model's default for the bytes per sample, or, where CUPTI cannot say the bytes
//! before arming, the default pair's.
//!
//! The constants were measured on an H200 (GH100, CUPTI 13.0, driver 580, 16 cores of a
//! Firecracker VM) under a bf16 matmul load; `docs/benchmarks-sampler.md` has the runs and the
//! model's error on each (`scripts/gpu/sampler.sh cost_model` measures them again). Another
//! machine's CPU moves every figure by its speed; the structure (bytes drive the cost) stays.

use cufall_trace::model::Nanos;
use std::fmt;

/// CPU the default interval may cost per GPU, in cores (8 GPUs of a node: 8 cores).
pub const CORE_BUDGET: f64 = 1.0;
/// The same for `cufall serve`, which samples for weeks beside the node's own work: about a
/// third of a core per GPU (the default pair at 200 µs; the DRAM metric alone at 50 µs), still
/// fine enough to see the millisecond gaps of a decode step.
pub const EXPORTER_CORE_BUDGET: f64 = 0.3;
/// The bytes per sample assumed when CUPTI cannot say them before arming: the default pair's.
pub const FALLBACK_BYTES_PER_SAMPLE: u64 = 25_529;
/// The interval of a session without counters: nothing is sampled (the manifest has no
/// sampling), it only sets the live view's finest bin, as the default pair's 50 µs always did.
pub const NO_COUNTERS_INTERVAL_NS: i64 = 50_000;

/// How the interval was chosen.
#[derive(Clone, Debug, PartialEq)]
pub enum IntervalChoice {
    /// `--interval`.
    Given,
    /// The cost model's default within `cores` per GPU; `budget_met` false when no step keeps
    /// the metrics within it (the coarsest step is taken).
    Model { budget_met: bool, cores: f64 },
    /// CUPTI could not say the bytes per sample before arming (`why`): the default pair's
    /// interval was taken.
    Fallback { why: String },
}

/// The share of one core the decode thread may be busy and still keep up: by this model the
/// finest lossless runs measured had their decoder 88–89 % busy (the default pair at 30 µs, the
/// tensor pipe alone at 25 µs, both 60 s); at 109 % (the tensor pipe at 20 µs) and more, samples
/// were lost.
pub const DECODE_BUSY_MAX: f64 = 0.9;
/// Intervals the default is chosen from (µs): round numbers a user recognises.
const DEFAULT_STEPS_US: [i64; 23] = [
    5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 200, 500, 1_000, 2_000, 5_000, 10_000,
    20_000, 50_000, 100_000,
];

/// Costs of the pipeline's parts on one machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// CUPTI's decoder, per byte of counter data per sample.
    pub decode_ns_per_byte: f64,
    /// CUPTI's decoder, per sample whatever its size.
    pub decode_ns_per_sample: f64,
    /// One decode call, beyond its samples.
    pub decode_call_ns: f64,
    /// How often the decoder calls (`sizing::DECODE_PERIOD`).
    pub decode_period_ns: f64,
    /// Sealing an image, per sample: timestamps (`cuptiPmSamplingCounterDataGetSampleInfo`)
    /// and the hole detector, on the decode thread.
    pub seal_ns_per_sample: f64,
    /// Evaluation (`cuptiProfilerHostEvaluateToGpuValues`), per metric and per byte.
    pub eval_ns_per_metric: f64,
    pub eval_ns_per_byte: f64,
    /// Restoring a used image slot to blank, per byte.
    pub restore_ns_per_byte: f64,
    /// CUPTI's decoder, per sample, for each of GH100's `_realtime` counters beyond what their
    /// bytes cost: they decode at about 2.4 ns per byte against 0.95 for the others (the default
    /// pair with the `_realtime` tensor counter, 11,705 B, decoded at 21.8 µs per sample where
    /// its bytes alone predict 13). Added per metric by [`CostModel::for_metrics`].
    pub decode_ns_per_realtime_metric: f64,
}

impl CostModel {
    /// Measured on the H200 (2026-11-30 to 2026-12-02, `docs/benchmarks-sampler.md`): decode
    /// 5.7 µs per sample for the DRAM metric alone (4,729 B) and 26.3 µs for the default pair
    /// (25,529 B) inside cufall, 1 ms per decode call; evaluation 4.3 µs (DRAM alone), 8.6 µs
    /// (tensor alone, 20,825 B) and 13.6 µs (the pair); restoring 0.7 and 3.4 µs; timestamps
    /// and holes 0.3 µs.
    pub const H200: CostModel = CostModel {
        decode_ns_per_byte: 0.95,
        decode_ns_per_sample: 840.0,
        decode_call_ns: 1_000_000.0,
        decode_period_ns: 25_000_000.0,
        seal_ns_per_sample: 310.0,
        eval_ns_per_metric: 3_400.0,
        eval_ns_per_byte: 0.2665,
        restore_ns_per_byte: 0.14,
        decode_ns_per_realtime_metric: 8_600.0,
    };

    /// This model for the metrics `names`: what their kinds cost beyond their bytes (GH100's
    /// `_realtime` counters decode slower per byte).
    pub fn for_metrics<S: AsRef<str>>(self, names: &[S]) -> CostModel {
        let realtime = names
            .iter()
            .filter(|n| {
                n.as_ref()
                    .split('.')
                    .next()
                    .is_some_and(|b| b.ends_with("_realtime"))
            })
            .count();
        CostModel {
            decode_ns_per_sample: self.decode_ns_per_sample
                + self.decode_ns_per_realtime_metric * realtime as f64,
            ..self
        }
    }

    /// What sampling `bytes_per_sample` bytes of counter data in `metrics` metrics every
    /// `interval_ns` costs one GPU.
    pub fn predict(&self, bytes_per_sample: u64, metrics: usize, interval_ns: Nanos) -> Prediction {
        let b = bytes_per_sample as f64;
        let iv = interval_ns.get().max(1) as f64;
        // A call every decode period moves period / interval samples (at least one).
        let per_call = (self.decode_period_ns / iv).max(1.0);
        let decode_ns = self.decode_ns_per_sample
            + self.decode_ns_per_byte * b
            + self.decode_call_ns / per_call
            + self.seal_ns_per_sample;
        let eval_ns = self.eval_ns_per_metric * metrics.max(1) as f64 + self.eval_ns_per_byte * b;
        let restore_ns = self.restore_ns_per_byte * b;
        Prediction {
            bytes_per_sample,
            interval_ns,
            decode_busy: decode_ns / iv,
            eval_cores: eval_ns / iv,
            restore_cores: restore_ns / iv,
        }
    }

    /// The finest interval (whole µs) at which the decoder keeps up.
    pub fn finest_lossless_ns(&self, bytes_per_sample: u64, metrics: usize) -> Nanos {
        // The decoder's busy share falls as the interval grows: the first whole µs that fits.
        (1..=1_000_000i64)
            .map(|us| Nanos(us * 1_000))
            .find(|&iv| self.predict(bytes_per_sample, metrics, iv).lossless())
            .unwrap_or(Nanos(1_000_000_000))
    }

    /// The default interval: the finest round interval that is lossless and costs at most
    /// `cores` per GPU ([`CORE_BUDGET`], [`EXPORTER_CORE_BUDGET`]), and whether one did (else the
    /// coarsest step, 100 ms: a metric set of megabytes per sample meets the budget at no step).
    pub fn default_interval(
        &self,
        bytes_per_sample: u64,
        metrics: usize,
        cores: f64,
    ) -> (Nanos, bool) {
        DEFAULT_STEPS_US
            .iter()
            .map(|us| Nanos(us * 1_000))
            .find(|&iv| {
                let p = self.predict(bytes_per_sample, metrics, iv);
                p.lossless() && p.cores() <= cores
            })
            .map_or(
                (
                    Nanos(DEFAULT_STEPS_US[DEFAULT_STEPS_US.len() - 1] * 1_000),
                    false,
                ),
                |iv| (iv, true),
            )
    }

    /// A session's sampling interval and how it was chosen: `given` (`--interval`) when there
    /// is one; else the [`Self::default_interval`] within `cores` per GPU for `bytes` per sample
    /// of `metrics` metrics; where CUPTI could not say the bytes before arming (`Err`: why), the
    /// default pair's interval within `cores`, whatever metrics were asked (50 µs within one
    /// core per GPU, 200 µs within the exporter's budget).
    pub fn choose_interval<E: fmt::Display>(
        &self,
        given: Option<Nanos>,
        bytes: Result<u64, E>,
        metrics: usize,
        cores: f64,
    ) -> (Nanos, IntervalChoice) {
        match (given, bytes) {
            (Some(iv), _) => (iv, IntervalChoice::Given),
            (None, Ok(bytes)) => {
                let (iv, budget_met) = self.default_interval(bytes, metrics, cores);
                (iv, IntervalChoice::Model { budget_met, cores })
            }
            (None, Err(why)) => {
                let (iv, _) =
                    self.default_interval(FALLBACK_BYTES_PER_SAMPLE, metrics.max(2), cores);
                let why = why.to_string();
                (iv, IntervalChoice::Fallback { why })
            }
        }
    }

    /// This model with the decoder calling every `period` (shorter with a short `--margin`).
    pub fn with_decode_period(self, period: std::time::Duration) -> CostModel {
        CostModel {
            decode_period_ns: period.as_nanos() as f64,
            ..self
        }
    }
}

/// Counter data flowing faster than this (bytes per second) gets the larger hardware buffer.
/// Measured: the default pair at 50 µs (510 MB/s) and the DRAM metric alone at 10 µs (473 MB/s)
/// ran lossless with 128 MiB; the pair at 30 µs (850 MB/s) needed 512 MiB.
const SMALL_HW_BUFFER_UP_TO_BYTES_PER_S: f64 = 600e6;

/// The PM-sampling hardware buffer for a rate: 128 MiB while counter data flows at up to
/// 600 MB/s, 512 MiB above. The whole buffer is resident memory, so it is kept small where the
/// decoder has room.
pub fn hw_buffer_bytes(bytes_per_sample: u64, interval_ns: Nanos) -> usize {
    let rate = bytes_per_sample as f64 * 1e9 / interval_ns.get().max(1) as f64;
    if rate <= SMALL_HW_BUFFER_UP_TO_BYTES_PER_S {
        128 << 20
    } else {
        512 << 20
    }
}

/// The model's answer for one metric set at one interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub bytes_per_sample: u64,
    pub interval_ns: Nanos,
    /// Share of one core the decode thread is busy (above [`DECODE_BUSY_MAX`]: samples lost).
    pub decode_busy: f64,
    /// Cores the evaluator threads use together.
    pub eval_cores: f64,
    /// Cores restoring image slots takes (on the evaluator threads).
    pub restore_cores: f64,
}

impl Prediction {
    /// CPU of one GPU's pipeline, in cores. A decoder that cannot keep up is busy all the time
    /// (one core at most), and only the samples it decodes are evaluated and restored.
    pub fn cores(&self) -> f64 {
        let kept = 1.0 - self.loss_fraction();
        self.decode_busy.min(1.0) + (self.eval_cores + self.restore_cores) * kept
    }

    /// Whether the decoder keeps up.
    pub fn lossless(&self) -> bool {
        self.decode_busy <= DECODE_BUSY_MAX
    }

    /// The share of samples a decoder that cannot keep up loses at most: what it cannot decode
    /// in time (0 when it keeps up).
    pub fn loss_fraction(&self) -> f64 {
        if self.lossless() {
            0.0
        } else {
            (1.0 - DECODE_BUSY_MAX / self.decode_busy).max(0.0)
        }
    }
}

impl fmt::Display for Prediction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes of counter data per sample: decoder {:.0} % busy, {:.2} cores in all",
            self.bytes_per_sample,
            self.decode_busy * 100.0,
            self.cores()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAM: u64 = 4_729;
    const TENSOR: u64 = 20_825;
    const PAIR: u64 = 25_529;
    /// The default pair with GH100's `_realtime` tensor counter.
    const RT_PAIR: u64 = 11_705;
    const RT_NAMES: [&str; 2] = [
        "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ];

    fn within(pred: f64, measured: f64, share: f64) -> bool {
        (pred - measured).abs() <= measured * share
    }

    #[test]
    fn the_model_meets_the_runs_it_was_fitted_to_within_15_percent() {
        let m = CostModel::H200;
        // (bytes, metrics, interval, measured cores) of 20-60 s runs under a matmul load.
        for (b, n, iv, cores) in [
            (DRAM, 1, 10_000, 1.12),
            (DRAM, 1, 10_000, 1.08),
            (DRAM, 1, 5_000, 1.79),
            (PAIR, 2, 30_000, 1.48),
            (PAIR, 2, 50_000, 0.82),
            (TENSOR, 1, 25_000, 1.21),
        ] {
            let p = m.predict(b, n, Nanos(iv));
            assert!(
                within(p.cores(), cores, 0.15),
                "{b} B at {iv} ns: predicted {:.2} cores, measured {cores}",
                p.cores()
            );
        }
        // The `_realtime` pair (2026-12-03, 60 s each): lossless at 40 and 25 µs, 26 % lost at
        // 15 µs.
        let rt = m.for_metrics(&RT_NAMES);
        for (iv, cores) in [(40_000, 0.90), (25_000, 1.26), (15_000, 1.50)] {
            let p = rt.predict(RT_PAIR, 2, Nanos(iv));
            assert!(
                within(p.cores(), cores, 0.15),
                "the realtime pair at {iv} ns: predicted {:.2} cores, measured {cores}",
                p.cores()
            );
        }
        assert!(rt.predict(RT_PAIR, 2, Nanos(25_000)).lossless());
        assert!(!rt.predict(RT_PAIR, 2, Nanos(15_000)).lossless());
        assert_eq!(
            m.for_metrics(&["dram__throughput.avg.pct_of_peak_sustained_elapsed"]),
            m
        );
    }

    #[test]
    fn the_interval_is_the_one_given_the_models_or_the_default_pairs() {
        let m = CostModel::H200;
        let none: Result<u64, &str> = Err("refused");
        assert_eq!(
            m.choose_interval(Some(Nanos(30_000)), Ok::<_, &str>(PAIR), 2, CORE_BUDGET),
            (Nanos(30_000), IntervalChoice::Given)
        );
        let (iv, choice) = m.choose_interval(None, Ok::<_, &str>(PAIR), 2, CORE_BUDGET);
        assert_eq!(
            (iv, choice),
            (
                Nanos(50_000),
                IntervalChoice::Model {
                    budget_met: true,
                    cores: CORE_BUDGET
                }
            )
        );
        // Without the bytes: the default pair's interval within the budget asked for.
        assert_eq!(
            m.choose_interval(None, none, 2, CORE_BUDGET).0,
            Nanos(50_000)
        );
        assert_eq!(
            m.choose_interval(None, none, 2, EXPORTER_CORE_BUDGET).0,
            Nanos(200_000)
        );
        assert_eq!(
            m.choose_interval(None, none, 1, EXPORTER_CORE_BUDGET).0,
            Nanos(200_000)
        );
        assert_eq!(
            m.choose_interval(None, none, 1, CORE_BUDGET).1,
            IntervalChoice::Fallback {
                why: "refused".into()
            }
        );
    }

    #[test]
    fn the_realtime_pair_goes_finer_than_the_usual_pair_within_one_core() {
        let m = CostModel::H200;
        let rt = m.for_metrics(&RT_NAMES);
        assert_eq!(
            rt.default_interval(RT_PAIR, 2, CORE_BUDGET),
            (Nanos(40_000), true)
        );
        assert!(rt.predict(RT_PAIR, 2, Nanos(40_000)).cores() < 0.9);
        assert_eq!(rt.finest_lossless_ns(RT_PAIR, 2), Nanos(25_000));
        assert_eq!(m.default_interval(PAIR, 2, CORE_BUDGET).0, Nanos(50_000));
    }

    #[test]
    fn lossless_where_the_runs_were_and_not_where_they_lost() {
        let m = CostModel::H200;
        assert!(m.predict(DRAM, 1, Nanos(10_000)).lossless());
        assert!(m.predict(PAIR, 2, Nanos(30_000)).lossless());
        assert!(m.predict(TENSOR, 1, Nanos(25_000)).lossless());
        assert!(
            !m.predict(DRAM, 1, Nanos(5_000)).lossless(),
            "5 µs lost 1.8 %"
        );
        assert!(
            !m.predict(TENSOR, 1, Nanos(20_000)).lossless(),
            "20 µs lost 2 %"
        );
        assert!(
            !m.predict(PAIR, 2, Nanos(20_000)).lossless(),
            "20 µs lost 28 %"
        );
        assert_eq!(m.finest_lossless_ns(PAIR, 2), Nanos(30_000));
        assert_eq!(m.finest_lossless_ns(TENSOR, 1), Nanos(25_000));
        assert!(m.finest_lossless_ns(DRAM, 1) < Nanos(10_000));
    }

    #[test]
    fn the_exporters_budget_picks_coarser_intervals_that_still_see_millisecond_gaps() {
        let m = CostModel::H200;
        let within = |b, n| m.default_interval(b, n, EXPORTER_CORE_BUDGET);
        assert_eq!(within(PAIR, 2), (Nanos(200_000), true));
        assert_eq!(within(DRAM, 1), (Nanos(50_000), true));
        for b in [313u64, DRAM, TENSOR, PAIR] {
            let (iv, met) = within(b, 2);
            assert!(met && iv <= Nanos(500_000), "{b} B: {iv}");
            assert!(m.predict(b, 2, iv).cores() <= EXPORTER_CORE_BUDGET);
            assert!(iv >= m.default_interval(b, 2, CORE_BUDGET).0);
        }
    }

    #[test]
    fn the_default_follows_bytes_not_the_metric_count() {
        let m = CostModel::H200;
        assert_eq!(m.default_interval(PAIR, 2, CORE_BUDGET).0, Nanos(50_000));
        assert_eq!(m.default_interval(TENSOR, 1, CORE_BUDGET).0, Nanos(40_000));
        let dram = m.default_interval(DRAM, 1, CORE_BUDGET).0;
        assert!(dram <= Nanos(12_000), "DRAM alone: {dram}");
        // A cheap counter goes finer than the DRAM metric; a huge one far coarser.
        assert!(m.default_interval(313, 1, CORE_BUDGET).0 < dram);
        assert_eq!(
            m.default_interval(649_017, 1, CORE_BUDGET).0,
            Nanos(1_000_000)
        );
        // Megabytes per sample meet the budget at no step: the coarsest, said so.
        assert_eq!(
            m.default_interval(200_000_000, 12, CORE_BUDGET),
            (Nanos(100_000_000), false)
        );
        assert_eq!(
            m.default_interval(20_000_000, 12, CORE_BUDGET),
            (Nanos(50_000_000), true)
        );
        assert!(m.default_interval(PAIR, 2, CORE_BUDGET).1);
        for b in [57u64, 313, DRAM, TENSOR, PAIR, 57_753, 649_017] {
            for n in 1..6 {
                let iv = m.default_interval(b, n, CORE_BUDGET).0;
                let p = m.predict(b, n, iv);
                assert!(p.lossless() && p.cores() <= CORE_BUDGET, "{b} B, {n}: {p}");
                assert!(iv >= m.finest_lossless_ns(b, n));
            }
        }
    }

    #[test]
    fn loss_is_predicted_only_beyond_what_the_decoder_holds() {
        let m = CostModel::H200;
        assert_eq!(m.predict(DRAM, 1, Nanos(10_000)).loss_fraction(), 0.0);
        let l = m.predict(DRAM, 1, Nanos(2_000)).loss_fraction();
        assert!(l > 0.3 && l < 1.0, "{l}");
    }

    #[test]
    fn the_hardware_buffer_grows_with_the_byte_rate() {
        assert_eq!(hw_buffer_bytes(PAIR, Nanos(50_000)), 128 << 20);
        assert_eq!(hw_buffer_bytes(DRAM, Nanos(10_000)), 128 << 20);
        assert_eq!(hw_buffer_bytes(PAIR, Nanos(30_000)), 512 << 20);
        assert_eq!(hw_buffer_bytes(DRAM, Nanos(5_000)), 512 << 20);
    }
}
