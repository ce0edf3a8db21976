//! The bf16 GPU implementation of the model, through cudarc (loaded at run time).
//!
//! Matrix products go to cuBLAS (`cublasGemmEx`, bf16 operands, f32 accumulation; the residual
//! stream and the logits are f32); everything else is CUDA C in `kernels.cu`, compiled by NVRTC
//! for the device's compute capability when the backend starts. Each model owns fixed device
//! buffers for its inputs and activations, so a decode forward pass (`t <= 64` tokens per
//! sequence) can be captured once per shape into a CUDA graph and replayed (`--graphs on`).
//!
//! How the pieces fit:
//! - `device`: finding the driver, the context and stream, NVRTC, cuBLAS, allocations and the
//!   one matrix-product call; everything else builds on [`Dev`].
//! - `weights`: the model's tensors on the device (seeded in place or uploaded).
//! - `model`: one model's paged KV cache, input and activation buffers, and their sizing
//!   (including the split-KV chunk rule, from the device's SM count).
//! - `forward`: the kernels of one forward pass, in order (embedding, layers, attention, head).
//! - `moe`: the sparse mixture-of-experts dispatch (router choice read on the host).
//! - `backend`: [`GpuBackend`], the target and draft models behind the [`crate::Backend`]
//!   trait, with the memory check and CUDA graph capture and replay.
//! - `bench`: the event-timed microbenchmarks of `--bench`.
//!
//! All `unsafe` of the engine is in this module: kernel launches (through `launch!`), raw
//! cuBLAS calls, and the driver calls cudarc's safe layer does not cover. Each file that needs it
//! allows `unsafe_code` itself; `model` and `bench` hold none.

/// Launch kernel `$name` of `$dev` (a `Dev`) on its stream. Kernel arguments are
/// pushed by value; pointers travel as u64 device addresses.
///
/// Each call site must pass the arguments in the order and with the types of the kernel's
/// signature in `kernels.cu` (u64 for pointers, i32 for int, f32 for float, u64 for unsigned
/// long long), every pointer a live allocation sized for the launch.
macro_rules! launch {
    ($dev:expr, $name:expr, $grid:expr, $block:expr, $($arg:expr),* $(,)?) => {{
        use cudarc::driver::PushKernelArg as _;
        let name: &str = $name;
        let f = $dev.f(name)?;
        let mut b = $dev.stream.launch_builder(f);
        $( let a = $arg; b.arg(&a); )*
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: $grid,
            block_dim: $block,
            shared_mem_bytes: 0,
        };
        // SAFETY: the argument list matches the kernel's signature in kernels.cu (same order and
        // types: u64 for pointers, i32 for int, f32 for float, u64 for unsigned long long), and
        // every pointer is a live allocation sized for the launch (the macro's contract, kept by
        // each call site).
        unsafe { b.launch(cfg) }.map_err(|source| $crate::GpuError::Launch {
            kernel: name.to_string(),
            source,
        })?;
    }};
}

mod backend;
mod bench;
mod device;
mod forward;
mod model;
mod moe;
mod weights;

pub use backend::GpuBackend;
pub use bench::{AttnBench, GemmBench};
pub use device::{Dev, probe};
pub use model::{ModelBytes, SPLIT_BLOCKS_PER_SM, model_bytes};
pub use weights::GpuWeights;
