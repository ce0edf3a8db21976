//! How the exporter answers `cufall control pause|resume`: through its control file
//! ([`crate::control_file`]), as `POST /pause` and `/resume` do.

use super::Exporter;

/// The exporter's control file: `cufall control pause|resume` reach it as `POST /pause` does.
pub fn control_file(
    exporter: &std::sync::Arc<Exporter>,
    listen: &str,
) -> anyhow::Result<crate::control_file::ControlFile> {
    crate::control_file::ControlFile::create(
        crate::control_file::Kind::Serve,
        false,
        listen,
        Some(control_handler(exporter)),
    )
}

/// How the exporter answers `cufall control`: as `POST /pause` and `/resume`; `state` is the
/// sampling state gauge's.
pub fn control_handler(exporter: &std::sync::Arc<Exporter>) -> crate::control_file::Handler {
    use crate::control_file::{Request, answer};
    let e = std::sync::Arc::clone(exporter);
    std::sync::Arc::new(move |req| match req {
        Request::Pause(d) => answer(e.pause(d)),
        Request::Resume => answer(e.resume()),
        Request::State => Ok(e.sampling_state().0.to_string()),
    })
}
