//! Finding the capture library and checking it before the program starts.

use std::path::{Path, PathBuf};

/// Environment variable that points cufall at another capture library (tests, packaging).
pub const ENV_LIBRARY: &str = "CUFALL_INJECT_LIBRARY";
/// Why capture cannot start.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(
        "the capture library {} was not found (looked {looked}). From cufall's source folder: \
`cargo build --release -p cufall-inject && cp target/release/{} {}` (the `./cufall` launcher \
builds it), or name it in {ENV_LIBRARY}; or record without capture: --capture none",
        cufall_capture::LIBRARY_FILE,
        cufall_capture::LIBRARY_FILE,
        put_in.as_deref().map_or_else(|| "DIR_OF_CUFALL/".to_string(), |d| format!("{}/", d.display()))
    )]
    LibraryMissing {
        looked: String,
        /// The folder of the running `cufall`, where the library belongs.
        put_in: Option<PathBuf>,
    },
    #[error(
        "{} is not a loadable capture library ({why}). Rebuild it with `cargo build --release -p cufall-inject`, or record without capture: --capture none",
        path.display()
    )]
    LibraryUnusable { path: PathBuf, why: String },
    #[error("cannot listen for the program's capture data at {}: {source}", path.display())]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where an installed cufall keeps the capture library, under its prefix: the wheel installs
/// `cufall` into `PREFIX/bin` and the library into `PREFIX/lib/cufall/`.
pub const INSTALLED_LIBRARY_DIR: &str = "lib/cufall";

/// Finds `libcufall_inject.so`: `$CUFALL_INJECT_LIBRARY`, else next to the running binary
/// (`target/release/` for a build, the install folder), else in the prefix's `lib/cufall/`
/// (a wheel's install), else one folder up (test binaries live in `target/debug/deps/`).
pub fn find_library() -> Result<PathBuf, CaptureError> {
    let mut looked = Vec::new();
    let mut candidates = Vec::new();
    let mut put_in = None;
    if let Some(p) = std::env::var_os(ENV_LIBRARY) {
        // Named explicitly: that library or none.
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(CaptureError::LibraryMissing {
                looked: format!("at {} (from {ENV_LIBRARY})", p.display()),
                put_in: p.parent().map(Path::to_path_buf),
            });
        }
        check_library(&p)?;
        return Ok(p);
    }
    if let Ok(exe) = std::env::current_exe() {
        let exe = exe.canonicalize().unwrap_or(exe);
        if let Some(dir) = exe.parent() {
            put_in = Some(dir.to_path_buf());
            candidates.push(dir.join(cufall_capture::LIBRARY_FILE));
            if let Some(up) = dir.parent() {
                candidates.push(
                    up.join(INSTALLED_LIBRARY_DIR)
                        .join(cufall_capture::LIBRARY_FILE),
                );
                candidates.push(up.join(cufall_capture::LIBRARY_FILE));
            }
        }
    }
    for c in candidates {
        if c.is_file() {
            check_library(&c)?;
            return Ok(c.canonicalize().unwrap_or(c));
        }
        looked.push(c.display().to_string());
    }
    Err(CaptureError::LibraryMissing {
        looked: if looked.is_empty() {
            "nowhere: the binary's own path is unknown".into()
        } else {
            looked.join(", ")
        },
        put_in,
    })
}

/// Checks, without loading it into cufall, that `path` is a 64-bit ELF shared library that
/// exports both entry points CUDA and NVTX look for.
pub fn check_library(path: &Path) -> Result<(), CaptureError> {
    let unusable = |why: String| CaptureError::LibraryUnusable {
        path: path.to_path_buf(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|e| unusable(format!("cannot read it: {e}")))?;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err(unusable("not an ELF file".into()));
    }
    if bytes[4] != 2 {
        return Err(unusable("not a 64-bit library".into()));
    }
    if u16::from_le_bytes([bytes[16], bytes[17]]) != 3 {
        return Err(unusable("not a shared library".into()));
    }
    for symbol in ["InitializeInjection\0", "InitializeInjectionNvtx2\0"] {
        if !bytes.windows(symbol.len()).any(|w| w == symbol.as_bytes()) {
            return Err(unusable(format!(
                "it does not export {}",
                symbol.trim_end_matches('\0')
            )));
        }
    }
    Ok(())
}
