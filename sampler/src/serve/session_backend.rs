//! The GPU [`Backend`] of `cufall serve`: each run is a session made exactly as `record` and the
//! live view make theirs (`session::prepare`, then `start` with a live feed and no trace).
//!
//! A run asks for the GPU counters; when another profiler holds them, the run samples NVML only
//! (so power and nvidia-smi's utilisation keep coming) and the supervisor stops it after its
//! current wait to ask for the counters again.

use super::{Backend, FEED_CAPACITY, Run, Started};
use crate::session::{self, CounterPolicy, SessionConfig, SessionError, SessionHandle};
use cufall_cupti::CuptiError;

impl Run for SessionHandle {
    fn error(&self) -> Option<String> {
        SessionHandle::error(self)
    }

    fn stop(self: Box<Self>) -> Vec<String> {
        SessionHandle::stop(*self).summary.errors
    }

    fn sharing(&self) -> Option<crate::pipeline::pause::CounterSharing> {
        Some(SessionHandle::sharing(self))
    }
}

/// Sessions over the GPUs of `cfg`.
pub struct SessionBackend {
    pub cfg: SessionConfig,
    pub selection: crate::metric_spec::Selection,
}

impl SessionBackend {
    /// Prepares and starts one session with `policy` for the counters.
    fn start_with(&self, policy: CounterPolicy) -> Result<Started, SessionError> {
        let cfg = SessionConfig {
            counters: policy,
            ..self.cfg.clone()
        };
        let prepared = session::prepare(&cfg)?;
        let (heatmaps, _) = prepared.heatmaps_for(&self.selection);
        let (tx, rx) = cufall_live::feed(prepared.feed_info(heatmaps), FEED_CAPACITY);
        let handle = prepared.start(Some(tx), None)?;
        Ok(Started {
            feed: rx,
            run: Box::new(handle),
        })
    }
}

impl Backend for SessionBackend {
    fn start(&mut self) -> Result<Started, SessionError> {
        match self.start_with(CounterPolicy::Required) {
            Err(SessionError::Cupti(e @ CuptiError::CountersBusy { .. })) => {
                // NVML only, saying why; the supervisor asks for the counters again later.
                let mut started = self.start_with(CounterPolicy::Off)?;
                let who = crate::control_file::held_by(&crate::argv0::command_name())
                    .map(|h| format!(" {h}"))
                    .unwrap_or_default();
                started.feed.info.counters_unavailable = Some(format!("{e}{who}"));
                Ok(started)
            }
            other => other,
        }
    }
}
