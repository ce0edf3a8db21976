//! What sampling will cost, stated before it starts ([`Cost`]: one line for the user, the
//! figures for `--stats-json`), from the cost model's prediction at the chosen interval.

use crate::cost::IntervalChoice;
use crate::sizing;
use cufall_trace::model::Nanos;
use serde::Serialize;

/// The cost model's prediction for a recording, as `--stats-json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PredictedCost {
    pub interval_ns: Nanos,
    pub bytes_per_sample: u64,
    pub decode_busy: f64,
    pub eval_cores: f64,
    pub restore_cores: f64,
    pub cores: f64,
    pub lossless: bool,
    pub loss_fraction: f64,
    pub finest_lossless_ns: Nanos,
    /// Whether the cost model chose the interval (no `--interval`).
    pub interval_chosen: bool,
}

/// What sampling will cost, stated before it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Cost {
    pub devices: usize,
    pub interval_ns: Nanos,
    pub metrics: usize,
    /// One counter-data image.
    pub image_bytes: u64,
    pub samples_per_image: u32,
    /// Images made up front per device, and the most a device may make.
    pub initial_images: usize,
    pub max_images: usize,
    pub hw_buffer_bytes: u64,
    pub eval_threads: usize,
    /// What the cost model says of this rate (bytes per sample, decoder load, cores).
    pub prediction: crate::cost::Prediction,
    /// The finest interval the model says the decoder holds for these metrics.
    pub finest_lossless_ns: Nanos,
    /// How the interval was chosen.
    pub choice: IntervalChoice,
}

/// `one core`, `0.3 of a core`, `2 cores`.
fn cores_text(cores: f64) -> String {
    if (cores - 1.0).abs() < 1e-9 {
        "one core".into()
    } else if cores < 1.0 {
        format!("{cores} of a core")
    } else {
        format!("{cores} cores")
    }
}

impl Cost {
    /// One line for the user.
    pub fn describe(&self) -> String {
        let per = self.image_bytes * self.initial_images as u64;
        let bytes = self.prediction.bytes_per_sample;
        let finest = crate::args::duration::interval_text(self.finest_lossless_ns.get());
        let why = match &self.choice {
            IntervalChoice::Model {
                budget_met: true,
                cores,
            } => format!(
                " (the finest interval at about {} per GPU for {bytes} bytes of counter data \
per sample; --interval sets another, down to {finest} without loss)",
                cores_text(*cores)
            ),
            IntervalChoice::Model {
                budget_met: false,
                cores,
            } => format!(
                " (the coarsest interval cufall chooses: no interval keeps {bytes} bytes of counter \
data per sample within about {} per GPU; choose cheaper metrics, `cufall metrics` gives \
each one's bytes)",
                cores_text(*cores)
            ),
            IntervalChoice::Fallback { why } => format!(
                " (the default pair's interval: CUPTI could not say the bytes per sample before \
the GPUs were armed ({why}); they are {bytes}, lossless down to {finest})"
            ),
            IntervalChoice::Given => format!(" ({bytes} bytes of counter data per sample)"),
        };
        format!(
            "sampling {} GPU(s) at {}{why} with {} metric(s): about {:.1} CPU cores (decoder {:.0} % \
busy) and {} of counter-data images per GPU ({} images of {} up front, up to {} on demand; plus a \
{} hardware buffer), {} evaluation threads per GPU",
            self.devices,
            crate::args::duration::interval_text(self.interval_ns.get()),
            self.metrics,
            self.prediction.cores(),
            self.prediction.decode_busy * 100.0,
            sizing::format_bytes(per),
            self.initial_images,
            sizing::format_bytes(self.image_bytes),
            self.max_images,
            sizing::format_bytes(self.hw_buffer_bytes),
            self.eval_threads
        )
    }

    /// The model's figures, for `--stats-json` (benchmarks put them beside what was measured).
    pub fn predicted(&self) -> PredictedCost {
        let p = &self.prediction;
        PredictedCost {
            interval_ns: self.interval_ns,
            bytes_per_sample: p.bytes_per_sample,
            decode_busy: p.decode_busy,
            eval_cores: p.eval_cores,
            restore_cores: p.restore_cores,
            cores: p.cores(),
            lossless: p.lossless(),
            loss_fraction: p.loss_fraction(),
            finest_lossless_ns: self.finest_lossless_ns,
            interval_chosen: self.choice != IntervalChoice::Given,
        }
    }

    /// The line to print before sampling when the model predicts lost samples at this rate:
    /// how many, and the interval that would lose none.
    pub fn loss_warning(&self) -> Option<String> {
        let p = &self.prediction;
        (!p.lossless()).then(|| {
            format!(
                "at {} the decoder would need {:.0} % of a core for {} bytes of counter data per \
sample (it keeps up to {:.0} %): expect up to {:.0} % of samples lost, each hole recorded as a \
drop; {} or longer loses none (or choose cheaper metrics: `cufall metrics` gives each one's bytes \
per sample)",
                crate::args::duration::interval_text(self.interval_ns.get()),
                p.decode_busy * 100.0,
                p.bytes_per_sample,
                crate::cost::DECODE_BUSY_MAX * 100.0,
                (p.loss_fraction() * 100.0).ceil(),
                crate::args::duration::interval_text(self.finest_lossless_ns.get())
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost_at(bytes: u64, metrics: usize, interval_ns: Option<i64>) -> Cost {
        let model = crate::cost::CostModel::H200;
        let iv = interval_ns.map(Nanos).unwrap_or_else(|| {
            model
                .default_interval(bytes, metrics, crate::cost::CORE_BUDGET)
                .0
        });
        Cost {
            devices: 1,
            interval_ns: iv,
            metrics,
            image_bytes: 80_000_000,
            samples_per_image: 17_000,
            initial_images: 2,
            max_images: 6,
            hw_buffer_bytes: crate::cost::hw_buffer_bytes(bytes, iv) as u64,
            eval_threads: 2,
            prediction: model.predict(bytes, metrics, iv),
            finest_lossless_ns: model.finest_lossless_ns(bytes, metrics),
            choice: match interval_ns {
                Some(_) => IntervalChoice::Given,
                None => IntervalChoice::Model {
                    budget_met: true,
                    cores: crate::cost::CORE_BUDGET,
                },
            },
        }
    }

    #[test]
    fn the_lines_quoted_in_the_sampler_docs_are_what_the_model_prints() {
        let docs = include_str!("../../../docs/sampler.md");
        let chosen = cost_at(4_729, 1, None).describe();
        let head = "sampling 1 GPU(s) at 12us (the finest interval at about one core per GPU for \
4729 bytes of counter data per sample; --interval sets another, down to 7us without loss) with 1 \
metric(s): about 1.0 CPU cores (decoder 51 % busy) and ";
        assert!(chosen.starts_with(head), "{chosen}");
        assert!(docs.contains(&format!("cufall: {head}...")));
        assert_eq!(cost_at(4_729, 1, None).loss_warning(), None);
        let warning = cost_at(4_729, 1, Some(5_000))
            .loss_warning()
            .expect("5 µs loses samples");
        assert!(
            docs.contains(&format!("cufall: note: {warning}")),
            "{warning}"
        );
        let pair = cost_at(25_529, 2, None).describe();
        assert!(pair.contains("at 50us ("), "{pair}");
        assert!(
            pair.contains("about 0.9 CPU cores (decoder 55 % busy)"),
            "{pair}"
        );
        let mut heavy = cost_at(20_000_000, 12, None);
        heavy.choice = IntervalChoice::Model {
            budget_met: false,
            cores: crate::cost::CORE_BUDGET,
        };
        assert!(
            heavy
                .describe()
                .contains("no interval keeps 20000000 bytes of counter data"),
            "{}",
            heavy.describe()
        );
        let mut fallback = cost_at(4_729, 1, Some(50_000));
        fallback.choice = IntervalChoice::Fallback {
            why: "refused".into(),
        };
        let line = fallback.describe();
        assert!(
            line.contains("(the default pair's interval: CUPTI could not say"),
            "{line}"
        );
        assert!(
            line.contains("(refused); they are 4729, lossless down to 7us)"),
            "{line}"
        );
        let given = cost_at(25_529, 2, Some(30_000)).describe();
        assert!(
            given.contains("at 30us (25529 bytes of counter data per sample) with"),
            "{given}"
        );
    }
}
