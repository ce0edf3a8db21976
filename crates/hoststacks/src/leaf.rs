//! Mixed stacks: the one native frame a Python thread is in, appended under its innermost
//! Python frame (`sdpa_attention_forward (…:158) → cudaStreamSynchronize (libcudart.so.12)`).
//!
//! The frame comes from the thread's perf samples ([`crate::native::chains`]), the
//! system call it waits in from `/proc` (appended by [`crate::pyspy`]). From a
//! sampled call chain (innermost first) one frame is chosen ([`pick`]):
//!
//! 1. only the frames below the interpreter count (up to the first frame in `libpython*` or a
//!    `python*` executable); a chain that starts in the interpreter gives no frame (the thread
//!    runs Python: its Python frames say where);
//! 2. the outermost CUDA or NCCL API entry point among them (`cudaStreamSynchronize` rather
//!    than the `cuStreamSynchronize` it calls): the call the program made;
//! 3. else the innermost frame with a function name; when that is in the C library or the
//!    dynamic loader (`__futex_abstimed_wait_common`, `malloc`) and a named frame of a known
//!    GPU or framework library (libcudart, libcuda, libtorch*, libc10*, libnccl, libcublas*,
//!    libcudnn*, JAX's xla_extension) is at most [`NEAR`] frames further out, that one;
//! 4. else the innermost frame as its address in its library (`0x1a2b (libcuda.so.1)`): at
//!    least the library is known.
//!
//! The chosen frame is held while the thread's innermost Python frame stays the same: a thread
//! that uses CPU is sampled again within half an interval of CPU time, so a thread without a
//! new sample is where its newest one was. It is appended under the innermost Python frame; a
//! thread that waits in a system call keeps that call innermost, with the held frame above it
//! when that is a named function outside the C library (`→ cudaStreamSynchronize
//! (libcudart.so.12) → futex`).

use super::source::{Frame, ThreadStack};
use cufall_model::FrameKind;

/// How far out from a C library frame a known library's frame may be to be chosen instead.
pub const NEAR: usize = 4;

/// Libraries whose frames say more than the C library's inside them.
const KNOWN: [&str; 9] = [
    "libcudart",
    "libcuda.",
    "libtorch",
    "libc10",
    "libnccl",
    "libcublas",
    "libcudnn",
    "xla_extension",
    "libjax",
];

/// Whether a library is the Python interpreter (a `libpython3.12.so` or a `python3.12`
/// executable; an extension module `_ctypes.cpython-312-…so` is not).
pub fn is_interpreter(module: &str) -> bool {
    let m = module.to_ascii_lowercase();
    m.starts_with("libpython") || m.starts_with("python")
}

/// The C library, its threads library and the dynamic loader.
fn is_system(module: &str) -> bool {
    [
        "libc.so",
        "libc-",
        "libpthread",
        "ld-linux",
        "ld-musl",
        "libdl",
    ]
    .iter()
    .any(|p| module.starts_with(p))
}

/// A function name found in a symbol table (not an address, not a placeholder).
fn named(f: &Frame) -> bool {
    !f.module.is_empty() && !f.function.starts_with("0x") && !f.function.starts_with('(')
}

/// A CUDA runtime or driver API, or NCCL, entry point: `cudaMemcpyAsync`, `cuLaunchKernel`,
/// `ncclAllReduce`.
pub fn is_gpu_api(function: &str) -> bool {
    ["cuda", "cu", "nccl"].iter().any(|p| {
        function
            .strip_prefix(p)
            .and_then(|rest| rest.chars().next())
            .is_some_and(|c| c.is_ascii_uppercase())
    })
}

/// The one frame of a sampled call chain (innermost first) worth appending; the rule is the
/// module's.
pub fn pick(chain: &[Frame]) -> Option<Frame> {
    let below = chain
        .iter()
        .position(|f| is_interpreter(&f.module))
        .unwrap_or(chain.len());
    let native = &chain[..below];
    let first = native.first()?;
    if let Some(api) = native.iter().rev().find(|f| is_gpu_api(&f.function)) {
        return Some(api.clone());
    }
    let Some(i) = native.iter().position(named) else {
        return Some(first.clone());
    };
    if is_system(&native[i].module)
        && let Some(known) = native[i + 1..]
            .iter()
            .take(NEAR)
            .find(|f| named(f) && KNOWN.iter().any(|k| f.module.starts_with(k)))
    {
        return Some(known.clone());
    }
    Some(native[i].clone())
}

/// A thread's chosen native frame, and the innermost Python frame it was chosen under.
#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    pub frame: Frame,
    python: Option<Frame>,
}

/// The innermost Python frame of a stack.
fn innermost_python(stack: &ThreadStack) -> Option<&Frame> {
    stack.frames.iter().find(|f| f.kind == FrameKind::Python)
}

/// Appends a Python thread's native frame to its stack: `chain` is its newest perf sample
/// since the last round (None: no new one), `held` what was chosen for it before.
pub fn merge(stack: &mut ThreadStack, chain: Option<&[Frame]>, held: &mut Option<Held>) {
    let python = innermost_python(stack).cloned();
    if let Some(chain) = chain {
        *held = pick(chain).map(|frame| Held {
            frame,
            python: python.clone(),
        });
    }
    if held.as_ref().is_some_and(|h| h.python != python) {
        // Back in Python and into another call since: the sample is of the old one.
        *held = None;
    }
    let Some(h) = held else {
        return;
    };
    let in_syscall = stack
        .frames
        .first()
        .is_some_and(|f| f.kind == FrameKind::Native);
    if !in_syscall {
        stack.frames.insert(0, h.frame.clone());
    } else if named(&h.frame) && !is_system(&h.frame.module) {
        stack.frames.insert(1, h.frame.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_model::{Gil, HostState};

    fn native(function: &str, module: &str) -> Frame {
        Frame {
            function: function.into(),
            file: format!("/usr/lib/{module}"),
            line: None,
            module: module.into(),
            kind: FrameKind::Native,
        }
    }

    fn python(function: &str, line: u32) -> Frame {
        Frame {
            function: function.into(),
            file: "/app/model.py".into(),
            line: Some(line),
            module: "model".into(),
            kind: FrameKind::Python,
        }
    }

    fn syscall(name: &str) -> Frame {
        Frame {
            function: name.into(),
            file: String::new(),
            line: None,
            module: "kernel".into(),
            kind: FrameKind::Native,
        }
    }

    fn stack(frames: Vec<Frame>) -> ThreadStack {
        ThreadStack {
            tid: 7,
            name: "MainThread".into(),
            state: HostState::Running,
            gil: Gil::Released,
            frames,
        }
    }

    fn names(s: &ThreadStack) -> Vec<String> {
        s.frames
            .iter()
            .map(|f| format!("{} ({})", f.function, f.module))
            .collect()
    }

    /// The interpreter frames and everything outside them, as a real chain has.
    fn outer() -> Vec<Frame> {
        vec![
            native("_PyEval_EvalFrameDefault", "libpython3.12.so.1.0"),
            native("PyObject_Vectorcall", "libpython3.12.so.1.0"),
            native("main", "python3.12"),
        ]
    }

    fn chain(inner: &[Frame]) -> Vec<Frame> {
        inner.iter().cloned().chain(outer()).collect()
    }

    #[test]
    fn the_outermost_cuda_call_below_the_interpreter_is_chosen() {
        let c = chain(&[
            native("0x1d2e3f", "libcuda.so.1"),
            native("cuStreamSynchronize", "libcuda.so.1"),
            native("cudaStreamSynchronize", "libcudart.so.12"),
            native("at::native::_local_scalar_dense_cuda", "libtorch_cuda.so"),
            native("THPVariable_item", "libtorch_python.so"),
        ]);
        let f = pick(&c).expect("a frame");
        assert_eq!(
            (f.function.as_str(), f.module.as_str()),
            ("cudaStreamSynchronize", "libcudart.so.12")
        );
        let launch = chain(&[
            native("0x9a", "libcuda.so.1"),
            native("cuLaunchKernel", "libcuda.so.1"),
            native("cublasLtMatmul", "libcublasLt.so.12"),
        ]);
        assert_eq!(pick(&launch).expect("a frame").function, "cuLaunchKernel");
        // A garbage frame of the frame-pointer walk above the interpreter is not looked at.
        let mut past = chain(&[native("spin", "libspin.so")]);
        past.push(native("cudaMemcpy", "libcudart.so.12"));
        assert_eq!(pick(&past).expect("a frame").function, "spin");
    }

    #[test]
    fn libc_internals_give_way_to_a_near_known_library_only() {
        let near = chain(&[
            native("__futex_abstimed_wait_common", "libc.so.6"),
            native("0x77", "libc10.so"),
            native(
                "c10::cuda::CUDACachingAllocator::emptyCache",
                "libc10_cuda.so",
            ),
        ]);
        assert_eq!(
            pick(&near).expect("a frame").function,
            "c10::cuda::CUDACachingAllocator::emptyCache"
        );
        let far = chain(&[
            native("__memmove_avx_unaligned_erms", "libc.so.6"),
            native("a", "libfoo.so"),
            native("b", "libfoo.so"),
            native("c", "libfoo.so"),
            native("d", "libfoo.so"),
            native("at::native::copy_", "libtorch_cpu.so"),
        ]);
        assert_eq!(
            pick(&far).expect("a frame").function,
            "__memmove_avx_unaligned_erms"
        );
        // Unknown libraries do not beat the C library: usleep is what it does.
        let unknown = chain(&[
            native("usleep", "libc.so.6"),
            native("ffi_call", "libffi.so.8"),
        ]);
        assert_eq!(pick(&unknown).expect("a frame").function, "usleep");
        // Unnamed frames are passed over for a named one.
        let unnamed = chain(&[native("0x1", "libcuda.so.1"), native("spin", "libspin.so")]);
        assert_eq!(pick(&unnamed).expect("a frame").function, "spin");
    }

    #[test]
    fn the_interpreter_gives_nothing_and_an_unnamed_leaf_its_library() {
        assert_eq!(pick(&outer()), None);
        assert_eq!(pick(&[]), None);
        let anon = chain(&[native("0x1d2e3f", "libcuda.so.1")]);
        let f = pick(&anon).expect("a frame");
        assert_eq!(
            (f.function.as_str(), f.module.as_str()),
            ("0x1d2e3f", "libcuda.so.1")
        );
        // An extension module is not the interpreter.
        let ext = chain(&[native(
            "PyCFuncPtr_call",
            "_ctypes.cpython-312-x86_64-linux-gnu.so",
        )]);
        assert_eq!(pick(&ext).expect("a frame").function, "PyCFuncPtr_call");
    }

    #[test]
    fn a_running_thread_gets_the_frame_under_its_innermost_python_frame() {
        let mut s = stack(vec![
            python("sdpa_attention_forward", 158),
            python("forward", 40),
        ]);
        let mut held = None;
        let c = chain(&[
            native("0x1", "libcuda.so.1"),
            native("cudaStreamSynchronize", "libcudart.so.12"),
        ]);
        merge(&mut s, Some(&c), &mut held);
        assert_eq!(
            names(&s),
            [
                "cudaStreamSynchronize (libcudart.so.12)",
                "sdpa_attention_forward (model)",
                "forward (model)"
            ]
        );
        // No new sample, the same Python frame: still there.
        let mut again = stack(vec![
            python("sdpa_attention_forward", 158),
            python("forward", 40),
        ]);
        merge(&mut again, None, &mut held);
        assert_eq!(names(&again)[0], "cudaStreamSynchronize (libcudart.so.12)");
        // Another Python line since: the old sample no longer stands.
        let mut moved = stack(vec![
            python("sdpa_attention_forward", 160),
            python("forward", 40),
        ]);
        merge(&mut moved, None, &mut held);
        assert_eq!(names(&moved)[0], "sdpa_attention_forward (model)");
        assert_eq!(held, None);
    }

    #[test]
    fn a_new_sample_in_the_interpreter_ends_the_held_frame() {
        let mut held = None;
        let mut s = stack(vec![python("loop", 3)]);
        merge(
            &mut s,
            Some(&chain(&[native("spin", "libspin.so")])),
            &mut held,
        );
        assert_eq!(names(&s), ["spin (libspin.so)", "loop (model)"]);
        let mut s = stack(vec![python("loop", 3)]);
        merge(&mut s, Some(&outer()), &mut held);
        assert_eq!(names(&s), ["loop (model)"]);
    }

    #[test]
    fn a_thread_in_a_system_call_keeps_it_innermost_with_the_call_above_it() {
        let mut held = None;
        let mut s = stack(vec![syscall("futex"), python("item", 12)]);
        let c = chain(&[
            native("__futex_abstimed_wait_common", "libc.so.6"),
            native("0x3", "libcuda.so.1"),
            native("cuStreamSynchronize", "libcuda.so.1"),
        ]);
        merge(&mut s, Some(&c), &mut held);
        assert_eq!(
            names(&s),
            [
                "futex (kernel)",
                "cuStreamSynchronize (libcuda.so.1)",
                "item (model)"
            ]
        );
        // A C library frame says no more than the system call: left out.
        let mut held = None;
        let mut s = stack(vec![syscall("clock_nanosleep"), python("nap", 5)]);
        merge(
            &mut s,
            Some(&chain(&[native("__clock_nanosleep", "libc.so.6")])),
            &mut held,
        );
        assert_eq!(names(&s), ["clock_nanosleep (kernel)", "nap (model)"]);
        // An address says no more either.
        let mut held = None;
        let mut s = stack(vec![syscall("futex"), python("wait", 9)]);
        merge(
            &mut s,
            Some(&chain(&[native("0x5de2", "libffi.so.8")])),
            &mut held,
        );
        assert_eq!(names(&s), ["futex (kernel)", "wait (model)"]);
        assert!(held.is_some(), "held for when the thread runs again");
        // Without a perf sample ever: the system call alone, as before.
        let mut s = stack(vec![syscall("futex"), python("wait", 9)]);
        merge(&mut s, None, &mut None);
        assert_eq!(names(&s), ["futex (kernel)", "wait (model)"]);
    }

    #[test]
    fn gpu_api_names_are_told_apart_from_lookalikes() {
        for f in [
            "cudaMemcpyAsync",
            "cuLaunchKernel",
            "ncclAllReduce",
            "cuStreamSynchronize",
        ] {
            assert!(is_gpu_api(f), "{f}");
        }
        for f in [
            "cublasGemmEx",
            "cudnnConvolutionForward",
            "curl_easy_perform",
            "cu",
            "current",
        ] {
            assert!(!is_gpu_api(f), "{f}");
        }
    }
}
