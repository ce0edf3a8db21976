//! A sampling session: the reusable API behind `cufall record` and the live view.
//!
//! ```no_run
//! # fn demo() -> Result<(), cufall_sampler::session::SessionError> {
//! use cufall_sampler::session::{prepare, SessionConfig};
//! let prepared = prepare(&SessionConfig::default())?; // validates everything, arms the GPUs
//! let (tx, _rx) = cufall_live::feed(prepared.feed_info(Vec::new()), 256);
//! let handle = prepared.start(Some(tx), None)?;        // samples flow to the live view
//! // ... later
//! let outcome = handle.stop();                          // drains, closes, sums up
//! # Ok(()) }
//! ```
//!
//! [`prepare`] does everything that can fail because of the user or the machine (driver, CUPTI,
//! privileges, metric names, pass count, interval, NVML) before anything is written, so a caller
//! can create the trace only once all of that passed. [`Prepared::start`] then only starts.
//!
//! | module | part |
//! |---|---|
//! | [`config`] | [`SessionConfig`] and its checks |
//! | [`arm`] | [`prepare`]: devices selected, metrics validated, the interval chosen, every device armed ([`Prepared`]) |
//! | [`handle`] | [`Prepared::start`] and the running [`SessionHandle`]: status, pause, windows, [`SessionOutcome`] |
//! | [`estimate`] | [`Cost`]: what sampling will cost, said before it starts |
//! | [`error`] | [`SessionError`] |

pub mod arm;
pub mod config;
pub mod error;
pub mod estimate;
pub mod handle;

pub use arm::{Prepared, prepare, unit_for};
pub use config::{CounterPolicy, DEFAULT_NVML_INTERVAL, SessionConfig};
pub use error::SessionError;
pub use estimate::{Cost, PredictedCost};
pub use handle::{CallSizeReport, DeviceReport, RunSummary, SessionHandle, SessionOutcome, Status};
