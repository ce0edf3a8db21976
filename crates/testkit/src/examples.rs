//! The bundled real recordings (`examples/`), copied for tests that damage or edit them.

use std::path::{Path, PathBuf};

/// The repository's `examples/` folder.
pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Copies the folder `from` into `to`, recursively (a trace is a folder of folders of files).
///
/// # Panics
/// On any I/O error: this is for tests, which should fail loudly.
#[allow(clippy::unwrap_used)]
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// A copy of the bundled recording `name` (e.g. `h200-torch-phases-api.cufall`) in `into`.
pub fn copy_example(into: &Path, name: &str) -> PathBuf {
    let dir = into.join(name);
    copy_dir(&examples_dir().join(name), &dir);
    dir
}

/// Rewrites the `manifest.json` of the trace folder `dir` after `edit` changed its JSON.
///
/// # Panics
/// When the manifest cannot be read, parsed or written: this is for tests.
#[allow(clippy::unwrap_used)]
pub fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}
