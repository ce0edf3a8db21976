//! The device: driver probe, context and stream, the NVRTC-compiled kernels, the cuBLAS handle
//! with its fixed workspace, allocations, and the one matrix-product call every pass uses.
#![allow(unsafe_code)] // reason: the driver probe, event tracking and raw cuBLAS calls are FFI.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublas::result::CublasError;
use cudarc::cublas::{CudaBlas, sys as bsys};
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, sys as dsys};

use crate::{EngineError, GpuError};

const KERNELS: &str = include_str!("kernels.cu");
/// Queries per block the split-KV kernel is compiled for (`attn_split_<hd>_<q>`): a pass with
/// more queries per KV head runs several query groups over the same keys.
pub(super) const SPLIT_QUERIES: [usize; 5] = [1, 2, 4, 5, 8];
/// Bytes of the cuBLAS workspace (fixed, so that cuBLAS never allocates during graph capture).
const WORKSPACE_BYTES: usize = 64 << 20;

/// Check that the NVIDIA driver and the CUDA libraries can be loaded, before cudarc would panic.
pub fn probe() -> Result<(), GpuError> {
    // SAFETY: only tries to dlopen the library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::NoDriver);
    }
    // SAFETY: as above.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(GpuError::NoLibrary {
            lib: "libcublas.so",
        });
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(GpuError::NoLibrary { lib: "libnvrtc.so" });
    }
    let n = CudaContext::device_count().map_err(|source| GpuError::DeviceQuery { source })?;
    if n < 1 {
        return Err(GpuError::NoDevice);
    }
    Ok(())
}

/// A device allocation with its raw address (event tracking is off: one stream).
pub(super) struct Buf {
    pub(super) mem: CudaSlice<u8>,
    pub(super) ptr: u64,
    pub(super) bytes: usize,
}

/// The context, stream, cuBLAS handle and compiled kernels.
pub struct Dev {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    blas: CudaBlas,
    pub(super) funcs: HashMap<String, CudaFunction>,
    _workspace: Buf,
    /// The device's name, as the driver reports it.
    pub name: String,
    /// Streaming multiprocessors of the device (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`).
    pub sm_count: usize,
}

/// Every kernel `kernels.cu` defines, by name.
fn kernel_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "init_uniform",
        "fill_background",
        "embed",
        "rmsnorm",
        "rope_cache",
        "attn_combine",
        "swiglu",
        "moe_gather",
        "moe_scatter",
        "topk",
        "kv_commit",
        "draft_feed",
        "attn_warp_64",
        "attn_warp_128",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for hd in [64, 128] {
        for q in SPLIT_QUERIES {
            names.push(format!("attn_split_{hd}_{q}"));
        }
    }
    names.push("attn_split_128_5_s3".into());
    names
}

impl Dev {
    /// Open device 0: probe the libraries, make a stream, compile and load the kernels, and set
    /// up cuBLAS.
    pub fn new() -> Result<Self, EngineError> {
        probe()?;
        let ctx = CudaContext::new(0).map_err(GpuError::driver("opening device 0"))?;
        // SAFETY: one stream does all the work, so cross-stream event tracking is not needed,
        // and raw pointers taken from slices stay valid while the slices live.
        unsafe { ctx.disable_event_tracking() };
        // A created stream: the legacy default stream cannot be captured into a graph.
        let stream = ctx
            .new_stream()
            .map_err(GpuError::driver("creating a stream"))?;
        let name = ctx
            .name()
            .map_err(GpuError::driver("reading the device name"))?;
        let sm = ctx
            .attribute(dsys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(GpuError::driver("reading the SM count"))?;
        let funcs = compile_kernels(&ctx)?;
        let blas = CudaBlas::new(stream.clone()).map_err(|source| GpuError::Cublas {
            call: "cublasCreate",
            source,
        })?;
        let ws = alloc_on(&stream, WORKSPACE_BYTES)?;
        // SAFETY: the workspace outlives the handle's use (both live in `Dev`); a fixed
        // workspace keeps cuBLAS from allocating during graph capture.
        let st = unsafe {
            bsys::cublasSetWorkspace_v2(
                *blas.handle(),
                ws.ptr as *mut std::ffi::c_void,
                WORKSPACE_BYTES,
            )
        };
        blas_ok(st, "cublasSetWorkspace")?;
        Ok(Dev {
            ctx,
            stream,
            blas,
            funcs,
            _workspace: ws,
            name,
            sm_count: usize::try_from(sm).unwrap_or(1).max(1),
        })
    }

    pub(super) fn f(&self, name: &str) -> Result<&CudaFunction, GpuError> {
        self.funcs
            .get(name)
            .ok_or_else(|| GpuError::MissingKernel { name: name.into() })
    }

    pub(super) fn alloc(&self, bytes: usize) -> Result<Buf, GpuError> {
        alloc_on(&self.stream, bytes)
    }

    /// Free and total device memory, bytes.
    pub fn free_bytes(&self) -> Result<(usize, usize), GpuError> {
        self.ctx
            .mem_get_info()
            .map_err(GpuError::driver("reading the free memory"))
    }

    /// Copy `vals` to the start of `buf`.
    pub(super) fn upload(&self, buf: &mut Buf, vals: &[u8]) -> Result<(), GpuError> {
        if vals.len() > buf.bytes {
            return Err(GpuError::InputTooLarge {
                bytes: vals.len(),
                capacity: buf.bytes,
            });
        }
        if vals.is_empty() {
            return Ok(());
        }
        self.stream
            .memcpy_htod(vals, &mut buf.mem.slice_mut(0..vals.len()))
            .map_err(GpuError::driver("copying inputs to the device"))
    }

    /// `y[rows, out] (+)= x[rows, inp] * w[out, inp]^T`, bf16 operands, f32 accumulation.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemm(
        &self,
        w: u64,
        x: u64,
        y: u64,
        out: usize,
        inp: usize,
        rows: usize,
        y_f32: bool,
        beta: f32,
    ) -> Result<(), GpuError> {
        let alpha = 1.0f32;
        let ctype = if y_f32 {
            bsys::cudaDataType::CUDA_R_32F
        } else {
            bsys::cudaDataType::CUDA_R_16BF
        };
        // SAFETY: w, x, y are live device allocations of at least out*inp, rows*inp and
        // rows*out elements; alpha and beta are read before the call returns (host pointer mode).
        let st = unsafe {
            bsys::cublasGemmEx(
                *self.blas.handle(),
                bsys::cublasOperation_t::CUBLAS_OP_T,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                out as i32,
                rows as i32,
                inp as i32,
                (&alpha as *const f32).cast(),
                w as *const std::ffi::c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                inp as i32,
                x as *const std::ffi::c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                inp as i32,
                (&beta as *const f32).cast(),
                y as *mut std::ffi::c_void,
                ctype,
                out as i32,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        blas_ok(st, "cublasGemmEx")
    }
}

/// Compile `kernels.cu` for the device's compute capability and load every kernel.
fn compile_kernels(ctx: &Arc<CudaContext>) -> Result<HashMap<String, CudaFunction>, GpuError> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(GpuError::driver("reading the compute capability"))?;
    let opts = cudarc::nvrtc::CompileOptions {
        options: vec![
            format!("--gpu-architecture=compute_{major}{minor}"),
            "--std=c++17".into(),
        ],
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(KERNELS, opts)
        .map_err(|source| GpuError::Compile { source })?;
    let module = ctx
        .load_module(ptx)
        .map_err(GpuError::driver("loading the compiled kernels"))?;
    let mut funcs = HashMap::new();
    for n in kernel_names() {
        let f = module
            .load_function(&n)
            .map_err(GpuError::driver("loading a kernel"))?;
        funcs.insert(n, f);
    }
    Ok(funcs)
}

fn blas_ok(st: bsys::cublasStatus_t, call: &'static str) -> Result<(), GpuError> {
    if st == bsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Cublas {
            call,
            source: CublasError(st),
        })
    }
}

pub(super) fn alloc_on(stream: &Arc<CudaStream>, bytes: usize) -> Result<Buf, GpuError> {
    let mem = stream
        .alloc_zeros::<u8>(bytes.max(16))
        .map_err(GpuError::driver("allocating device memory"))?;
    let ptr = {
        let (p, _guard) = mem.device_ptr(stream);
        p
    };
    Ok(Buf { mem, ptr, bytes })
}
