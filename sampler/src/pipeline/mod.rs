//! The PM-sampling pipeline of one device: it produces samples and drop records for the sink
//! ([`crate::sink`]), which writes them.
//!
//! ```text
//!  decode thread (1 per GPU)          evaluator threads (N per GPU)         sink thread (1)
//!  ─────────────────────────          ─────────────────────────────         ───────────────
//!  decode HW buffer → image A   ──▶   evaluate one chunk of a sealed    ──▶ reorder by seq
//!  seal A after 20 ms / N samples     image into a SampleBatch; the          (bounded), write
//!  read its timestamps, find holes    last chunk restores the written        the trace, feed the
//!  (drop records); go on with B ◀──   prefix and hands the image back        live view, count drops
//! ```
//!
//! | module | part |
//! |---|---|
//! | [`source`] | what the pipeline asks of CUPTI ([`PmSource`], [`ImageStore`], [`SampleEvaluator`]) and the CUPTI implementations |
//! | [`decode`] | the decode state machine: decode calls, sealing, holes, overflow re-arm, stop |
//! | [`evaluate`] | evaluator threads: chunks of sealed images → batches; failures become drops |
//! | [`device`] | arming a GPU through CUPTI and running its pipeline on a thread; arming it again after a pause |
//! | [`pause`] | sharing the counters: a pause releases every device's PM sampling, the end of the pause arms them again |
//!
//! The decoder never lets an image get near full (see [`crate::sizing`]), never evaluates, and
//! never initialises images through CUPTI after start: the evaluators restore the bytes decode
//! wrote from a blank pattern, and check now and then that decode wrote nowhere else. Every
//! hole in the timestamps becomes a drop record ([`crate::holes`]); every sample an evaluator
//! could not turn into values becomes one too, so the samples kept plus the samples in drop
//! records always account for every sample the hardware delivered.

pub mod counters;
pub mod decode;
pub mod device;
pub mod error;
pub mod evaluate;
pub mod pause;
pub mod source;

pub use counters::{CALL_SIZE_BINS, DeviceCounters, SLOW_DECODE, call_size_bin};
pub use decode::{DecodeConfig, DeviceParts, run_device};
pub use device::{DeviceSetup, DeviceThread, Ready, Rearm, spawn_device};
pub use error::{ArmError, PipelineError, error_chain, panic_message};
pub use source::{
    CuptiEvaluator, CuptiImages, CuptiSource, ImageStore, PmSource, Restored, SampleEvaluator,
};
