//! Whether libcupti is loaded: set once by [`crate::loader`], read by whatever may call CUPTI
//! before knowing (an error's description of its status).

use std::sync::atomic::{AtomicBool, Ordering};

static CUPTI_LOADED: AtomicBool = AtomicBool::new(false);

/// Whether libcupti has been found and loaded (then cudarc's CUPTI functions are safe to call).
pub fn cupti_loaded() -> bool {
    CUPTI_LOADED.load(Ordering::Acquire)
}

/// Records that libcupti is loaded, for the rest of the process.
pub(crate) fn set_loaded() {
    CUPTI_LOADED.store(true, Ordering::Release);
}
