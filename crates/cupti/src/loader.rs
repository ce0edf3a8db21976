//! Finding `libcuda` and `libcupti` before cudarc touches them.
//!
//! cudarc loads its libraries lazily by *name* (`libcupti.so`, `libcupti.so.13`, ...) through the
//! dynamic linker and panics when none loads. We look first, and when the linker alone cannot
//! find CUPTI we search the places users actually have it (CUDA_HOME, /usr/local/cuda, PyTorch's
//! `nvidia/*` wheels, ...). A library found by path is opened and kept open: the dynamic linker
//! then satisfies cudarc's later open-by-soname with the copy already loaded.

use crate::error::{CuptiError, Result};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static CUPTI_SOURCE: OnceLock<std::result::Result<String, Searched>> = OnceLock::new();
/// Libraries opened by path, kept open for the life of the process.
static KEPT: OnceLock<std::sync::Mutex<Vec<libloading::Library>>> = OnceLock::new();

pub use crate::loaded::cupti_loaded;

/// Checks that the NVIDIA driver library can be loaded.
pub fn ensure_driver() -> Result<()> {
    // SAFETY: `is_culib_present` only tries `dlopen` on candidate names and closes what it opens.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        return Ok(());
    }
    let mut searched = vec![
        "libcuda.so / libcuda.so.1 through the dynamic linker (LD_LIBRARY_PATH, the ldconfig cache, \
/usr/lib, /lib)"
            .to_string(),
    ];
    if let Ok(p) = std::env::var("LD_LIBRARY_PATH") {
        searched.push(format!("LD_LIBRARY_PATH={p}"));
    }
    Err(CuptiError::DriverNotFound {
        searched: searched.join("; "),
    })
}

/// Finds and loads libcupti once per process. Returns a description of where it came from.
pub fn ensure_cupti() -> Result<String> {
    let r = CUPTI_SOURCE.get_or_init(|| {
        let r = locate_and_load();
        if r.is_ok() {
            crate::loaded::set_loaded();
        }
        r
    });
    match r {
        Ok(s) => Ok(s.clone()),
        Err(Searched(places)) => Err(CuptiError::CuptiNotFound {
            searched: places.join(", "),
        }),
    }
}

/// The places searched for libcupti in vain, kept for every later call's error.
#[derive(Clone, Debug)]
struct Searched(Vec<String>);

fn locate_and_load() -> std::result::Result<String, Searched> {
    // SAFETY: as above, only dlopen/dlclose of candidate names.
    if unsafe { cudarc::cupti::sys::is_culib_present() } {
        return Ok("the dynamic linker's search path".to_string());
    }
    let dirs = candidate_dirs(&Env::from_process());
    let mut tried = Vec::new();
    for dir in &dirs {
        for file in cupti_files_in(dir) {
            tried.push(file.display().to_string());
            // SAFETY: loading libcupti runs its initialisers, which only register CUPTI's own
            // state; it is the same library cudarc would load by name.
            let lib = unsafe { libloading::Library::new(&file) };
            let Ok(lib) = lib else { continue };
            if let Ok(mut kept) = KEPT.get_or_init(Default::default).lock() {
                kept.push(lib);
            }
            // SAFETY: as above.
            if unsafe { cudarc::cupti::sys::is_culib_present() } {
                return Ok(file.display().to_string());
            }
        }
    }
    let mut searched: Vec<String> = vec![
        "the dynamic linker (LD_LIBRARY_PATH, the ldconfig cache) for libcupti.so, libcupti.so.13, \
libcupti.so.12"
            .to_string(),
    ];
    searched.extend(dirs.iter().map(|d| d.display().to_string()));
    if !tried.is_empty() {
        searched.push(format!(
            "found but could not load (wrong version or architecture?): {}",
            tried.join(", ")
        ));
    }
    Err(Searched(searched))
}

/// What the search depends on, so tests can supply their own.
#[derive(Clone, Debug, Default)]
pub struct Env {
    pub cuda_home: Vec<PathBuf>,
    pub ld_library_path: Vec<PathBuf>,
    pub python_prefixes: Vec<PathBuf>,
    pub home: Option<PathBuf>,
}

impl Env {
    pub fn from_process() -> Self {
        let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
        let cuda_home = [
            "CUDA_HOME",
            "CUDA_PATH",
            "CUDA_ROOT",
            "CUDA_TOOLKIT_ROOT_DIR",
        ]
        .iter()
        .filter_map(|k| var(k))
        .collect();
        let ld_library_path = std::env::var_os("LD_LIBRARY_PATH")
            .map(|v| std::env::split_paths(&v).collect())
            .unwrap_or_default();
        let python_prefixes = ["VIRTUAL_ENV", "CONDA_PREFIX"]
            .iter()
            .filter_map(|k| var(k))
            .collect();
        Env {
            cuda_home,
            ld_library_path,
            python_prefixes,
            home: var("HOME"),
        }
    }
}

/// Folders that may hold libcupti, most specific first. Only existing folders are returned.
pub fn candidate_dirs(env: &Env) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = env.cuda_home.clone();
    roots.push(PathBuf::from("/usr/local/cuda"));
    let mut versioned: Vec<PathBuf> = read_dir_matching(Path::new("/usr/local"), "cuda-");
    versioned.sort();
    versioned.reverse();
    roots.extend(versioned);
    roots.push(PathBuf::from("/opt/cuda"));
    roots.push(PathBuf::from("/usr/lib/cuda"));

    let mut dirs = Vec::new();
    for root in &roots {
        dirs.push(root.join("lib64"));
        dirs.push(root.join("lib"));
        dirs.push(root.join("extras/CUPTI/lib64"));
        for t in read_dir_matching(&root.join("targets"), "") {
            dirs.push(t.join("lib"));
        }
    }
    dirs.extend(env.ld_library_path.iter().cloned());
    dirs.push(PathBuf::from("/usr/lib/x86_64-linux-gnu"));
    dirs.push(PathBuf::from("/usr/lib/aarch64-linux-gnu"));
    for site in site_packages(env) {
        let nvidia = site.join("nvidia");
        // New wheels: nvidia/cu13/lib; older: nvidia/cuda_cupti/lib.
        for sub in read_dir_matching(&nvidia, "") {
            dirs.push(sub.join("lib"));
        }
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| d.is_dir() && seen.insert(d.clone()));
    dirs
}

fn site_packages(env: &Env) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = env.python_prefixes.clone();
    prefixes.push(PathBuf::from("/usr/local"));
    prefixes.push(PathBuf::from("/usr"));
    prefixes.push(PathBuf::from("/opt/conda"));
    if let Some(h) = &env.home {
        prefixes.push(h.join(".local"));
    }
    let mut out = Vec::new();
    for p in prefixes {
        for py in read_dir_matching(&p.join("lib"), "python3") {
            out.push(py.join("site-packages"));
            out.push(py.join("dist-packages"));
        }
    }
    out.push(PathBuf::from("/usr/lib/python3/dist-packages"));
    out
}

fn read_dir_matching(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

/// `libcupti.so*` files in `dir`, newest major version first.
fn cupti_files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().starts_with("libcupti.so"))
                .unwrap_or(false)
        })
        .collect();
    v.sort_by_key(|p| std::cmp::Reverse(cupti_rank(p)));
    v
}

/// Prefers `libcupti.so.13*`, then `.so.12*`, then the bare `.so` link.
pub fn cupti_rank(p: &Path) -> u32 {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rest = name.trim_start_matches("libcupti.so");
    let major: u32 = rest
        .trim_start_matches('.')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    major * 10 + u32::from(!rest.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_cupti_ranks_first() {
        let mut v = [
            PathBuf::from("/x/libcupti.so"),
            PathBuf::from("/x/libcupti.so.12"),
            PathBuf::from("/x/libcupti.so.13"),
        ];
        v.sort_by_key(|p| std::cmp::Reverse(cupti_rank(p)));
        assert_eq!(v[0], PathBuf::from("/x/libcupti.so.13"));
        assert_eq!(v[2], PathBuf::from("/x/libcupti.so"));
    }

    #[test]
    fn finds_a_pytorch_wheel_layout() {
        let tmp = std::env::temp_dir().join(format!("cufall-loader-{}", std::process::id()));
        let lib = tmp.join("lib/python3.12/site-packages/nvidia/cu13/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libcupti.so.13"), b"").unwrap();
        let env = Env {
            python_prefixes: vec![tmp.clone()],
            ..Env::default()
        };
        let dirs = candidate_dirs(&env);
        assert!(dirs.contains(&lib), "{dirs:?}");
        assert_eq!(cupti_files_in(&lib), vec![lib.join("libcupti.so.13")]);
        std::fs::remove_dir_all(&tmp).ok();
    }

    #[test]
    fn cuda_home_targets_layout_is_searched() {
        let tmp = std::env::temp_dir().join(format!("cufall-loader-ch-{}", std::process::id()));
        let lib = tmp.join("targets/x86_64-linux/lib");
        std::fs::create_dir_all(&lib).unwrap();
        let extras = tmp.join("extras/CUPTI/lib64");
        std::fs::create_dir_all(&extras).unwrap();
        let env = Env {
            cuda_home: vec![tmp.clone()],
            ..Env::default()
        };
        let dirs = candidate_dirs(&env);
        assert!(dirs.contains(&lib));
        assert!(dirs.contains(&extras));
        std::fs::remove_dir_all(&tmp).ok();
    }
}
