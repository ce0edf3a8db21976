//! The bf16 GPU implementation of the model, through cudarc (loaded at run time).
//!
//! Matrix products go to cuBLAS (`cublasGemmEx`, bf16 operands, f32 accumulation; the residual
//! stream and the logits are f32); everything else is CUDA C in `kernels.cu`, compiled by NVRTC
//! for the device's compute capability when the backend starts. Each model owns fixed device
//! buffers for its inputs and activations, so a decode forward pass (`t <= 64` tokens per
//! sequence) can be captured once per shape into a CUDA graph and replayed (`--graphs on`).
#![allow(unsafe_code)] // reason: kernel launches, raw cuBLAS calls and graph capture are FFI.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use cudarc::cublas::{CudaBlas, sys as bsys};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, DriverError,
    LaunchConfig, PushKernelArg, sys as dsys,
};

use crate::config::{MAX_SCRATCH, ModelConfig, RunConfig, VerifyAttn, draft_config};
use crate::cpu::{moe_gates, page_table};
use crate::weights::{HostWeights, background_key, tensor_key, tensor_specs};
use crate::{Backend, EngineError, Forward, Which};

const KERNELS: &str = include_str!("kernels.cu");
/// Queries per block the split-KV kernel is compiled for (`attn_split_<hd>_<q>`): a pass with
/// more queries per KV head runs several query groups over the same keys.
const SPLIT_QUERIES: [usize; 5] = [1, 2, 4, 5, 8];
/// Blocks the split-KV kernel aims for over the whole cache: 14 per SM of an H200 (132 SMs), about
/// 5 waves of 3 resident blocks, whatever the context length. Measured at 64k context: 1152 keys
/// per block (this target) beat 576 (31 per SM) by 8 % and 256 keys by more (docs/engine.md).
const SPLIT_TARGET_BLOCKS: usize = 132 * 14;
/// Most splits `attn_combine` merges (its shared-memory weight table).
const MAX_SPLITS: usize = 4096;

/// Keys per split-KV block for a cache of `max_context` positions: a multiple of 64 chosen so
/// that batch x KV heads x splits is about [`SPLIT_TARGET_BLOCKS`]. `SPECDEC_SPLIT_CHUNK`
/// overrides it (a benchmark knob; rounded up to a multiple of 64).
fn split_chunk(max_context: usize, batch: usize, kv_heads: usize) -> usize {
    let auto = (max_context * batch * kv_heads).div_ceil(SPLIT_TARGET_BLOCKS);
    let chosen = std::env::var("SPECDEC_SPLIT_CHUNK")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(auto);
    chosen
        .next_multiple_of(64)
        .clamp(64, 1 << 16)
        .max(max_context.div_ceil(MAX_SPLITS))
}

fn cuda(e: DriverError) -> EngineError {
    EngineError::Cuda(format!("{e:?}"))
}

/// Check that the NVIDIA driver and the CUDA libraries can be loaded, before cudarc would panic.
pub fn probe() -> Result<(), EngineError> {
    // SAFETY: only tries to dlopen the library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(EngineError::NoGpu(
            "no NVIDIA driver found (libcuda.so could not be loaded): run on a machine with an NVIDIA \
             GPU and its driver, or pass --backend cpu to run the f32 CPU reference on a small model"
                .into(),
        ));
    }
    // SAFETY: as above.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(EngineError::NoGpu(
            "libcublas.so (CUDA 13) could not be loaded: install the CUDA toolkit or add its lib64 \
             folder to LD_LIBRARY_PATH"
                .into(),
        ));
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(EngineError::NoGpu(
            "libnvrtc.so (CUDA 13) could not be loaded: install the CUDA toolkit or add its lib64 \
             folder to LD_LIBRARY_PATH"
                .into(),
        ));
    }
    let n = CudaContext::device_count().map_err(|e| {
        EngineError::NoGpu(format!(
            "the NVIDIA driver is there but reports no usable GPU ({e:?}): check nvidia-smi"
        ))
    })?;
    if n < 1 {
        return Err(EngineError::NoGpu(
            "the NVIDIA driver reports no GPU: check nvidia-smi".into(),
        ));
    }
    Ok(())
}

/// A device allocation with its raw address (event tracking is off: one stream).
struct Buf {
    mem: CudaSlice<u8>,
    ptr: u64,
    bytes: usize,
}

/// The context, stream, cuBLAS handle and compiled kernels.
pub struct Dev {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    blas: CudaBlas,
    funcs: HashMap<String, CudaFunction>,
    _workspace: Buf,
    pub name: String,
}

impl Dev {
    pub fn new() -> Result<Self, EngineError> {
        probe()?;
        let ctx = CudaContext::new(0).map_err(cuda)?;
        // SAFETY: one stream does all the work, so cross-stream event tracking is not needed,
        // and raw pointers taken from slices stay valid while the slices live.
        unsafe { ctx.disable_event_tracking() };
        // A created stream: the legacy default stream cannot be captured into a graph.
        let stream = ctx.new_stream().map_err(cuda)?;
        let (major, minor) = ctx.compute_capability().map_err(cuda)?;
        let name = ctx.name().map_err(cuda)?;
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![
                format!("--gpu-architecture=compute_{major}{minor}"),
                "--std=c++17".into(),
            ],
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(KERNELS, opts).map_err(|e| {
            EngineError::Cuda(format!("NVRTC could not compile the kernels: {e:?}"))
        })?;
        let module = ctx.load_module(ptx).map_err(cuda)?;
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
        let mut funcs = HashMap::new();
        for n in names {
            let f = module.load_function(&n).map_err(cuda)?;
            funcs.insert(n, f);
        }
        let blas = CudaBlas::new(stream.clone())
            .map_err(|e| EngineError::Cuda(format!("cuBLAS: {e:?}")))?;
        let ws_bytes = 64 << 20;
        let ws = alloc_on(&stream, ws_bytes)?;
        // SAFETY: the workspace outlives the handle's use (both live in `Dev`); a fixed
        // workspace keeps cuBLAS from allocating during graph capture.
        let st = unsafe {
            bsys::cublasSetWorkspace_v2(*blas.handle(), ws.ptr as *mut std::ffi::c_void, ws_bytes)
        };
        blas_ok(st, "cublasSetWorkspace")?;
        Ok(Dev {
            ctx,
            stream,
            blas,
            funcs,
            _workspace: ws,
            name,
        })
    }

    fn f(&self, name: &str) -> Result<&CudaFunction, EngineError> {
        self.funcs
            .get(name)
            .ok_or_else(|| EngineError::Cuda(format!("kernel {name} missing")))
    }

    fn alloc(&self, bytes: usize) -> Result<Buf, EngineError> {
        alloc_on(&self.stream, bytes)
    }

    pub fn free_bytes(&self) -> Result<(usize, usize), EngineError> {
        self.ctx.mem_get_info().map_err(cuda)
    }

    /// `y[rows, out] (+)= x[rows, inp] * w[out, inp]^T`, bf16 operands, f32 accumulation.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        w: u64,
        x: u64,
        y: u64,
        out: usize,
        inp: usize,
        rows: usize,
        y_f32: bool,
        beta: f32,
    ) -> Result<(), EngineError> {
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

fn blas_ok(st: bsys::cublasStatus_t, what: &str) -> Result<(), EngineError> {
    if st == bsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(EngineError::Cuda(format!("{what} failed: {st:?}")))
    }
}

fn alloc_on(stream: &Arc<CudaStream>, bytes: usize) -> Result<Buf, EngineError> {
    let mem = stream.alloc_zeros::<u8>(bytes.max(16)).map_err(cuda)?;
    let ptr = {
        let (p, _guard) = mem.device_ptr(stream);
        p
    };
    Ok(Buf { mem, ptr, bytes })
}

/// Kernel arguments are pushed by value; pointers travel as u64 device addresses.
macro_rules! launch {
    ($dev:expr, $name:expr, $grid:expr, $block:expr, $($arg:expr),* $(,)?) => {{
        let f = $dev.f($name)?;
        let mut b = $dev.stream.launch_builder(f);
        $( let a = $arg; b.arg(&a); )*
        let cfg = LaunchConfig { grid_dim: $grid, block_dim: $block, shared_mem_bytes: 0 };
        // SAFETY: the argument list matches the kernel's signature in kernels.cu (same order and
        // types: u64 for pointers, i32 for int, f32 for float, u64 for unsigned long long), and
        // every pointer is a live allocation sized for the launch.
        unsafe { b.launch(cfg) }.map_err(cuda)?;
    }};
}

enum MlpW {
    Dense {
        gate_up: Arc<Buf>,
        down: Arc<Buf>,
    },
    Moe {
        router: Arc<Buf>,
        experts: Vec<(Arc<Buf>, Arc<Buf>)>,
    },
}

struct LayerW {
    attn_norm: Arc<Buf>,
    wqkv: Arc<Buf>,
    wo: Arc<Buf>,
    mlp_norm: Arc<Buf>,
    mlp: MlpW,
}

/// Weights on the device, shared by reference (self-speculation reuses the target's).
#[derive(Clone)]
pub struct GpuWeights {
    cfg: ModelConfig,
    t: Arc<HashMap<String, Arc<Buf>>>,
}

impl GpuWeights {
    /// Generate seeded weights in place (same values as [`HostWeights::seeded`]).
    pub fn seeded(dev: &Dev, cfg: &ModelConfig, seed: u64) -> Result<Self, EngineError> {
        let mut t = HashMap::new();
        for s in tensor_specs(cfg) {
            let n = s.numel();
            let buf = dev.alloc(n * 2)?;
            let key = tensor_key(seed, &s.name);
            launch!(
                dev,
                "init_uniform",
                (1024, 1, 1),
                (256, 1, 1),
                buf.ptr,
                n as u64,
                key,
                s.scale,
                s.offset
            );
            t.insert(s.name, Arc::new(buf));
        }
        Ok(GpuWeights {
            cfg: cfg.clone(),
            t: Arc::new(t),
        })
    }

    /// Upload host weights as bf16.
    pub fn upload(dev: &Dev, w: &HostWeights) -> Result<Self, EngineError> {
        let mut t = HashMap::new();
        for s in tensor_specs(&w.cfg) {
            let vals = w.get(&s.name)?;
            let bytes: Vec<u8> = vals
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect();
            let mut buf = dev.alloc(bytes.len())?;
            dev.stream
                .memcpy_htod(&bytes, &mut buf.mem.slice_mut(0..bytes.len()))
                .map_err(cuda)?;
            t.insert(s.name, Arc::new(buf));
        }
        Ok(GpuWeights {
            cfg: w.cfg.clone(),
            t: Arc::new(t),
        })
    }

    fn get(&self, n: &str) -> Result<Arc<Buf>, EngineError> {
        self.t
            .get(n)
            .cloned()
            .ok_or_else(|| EngineError::Weights(format!("no tensor `{n}` on the device")))
    }
}

/// Bytes of GPU memory one model needs for a run (weights excluded).
pub fn model_bytes(cfg: &ModelConfig, run: &RunConfig) -> (usize, usize) {
    let pps = run.max_context.div_ceil(run.page_size);
    let kv = 2 * cfg.layers * run.batch * pps * run.page_size * cfg.kv_heads * cfg.head_dim * 2;
    let nmax = run.batch * run.prompt_len.max(MAX_SCRATCH);
    let e = cfg.experts.max(1);
    let per_row = cfg.d_model * 6
        + cfg.qkv_dim() * 2
        + cfg.heads * cfg.head_dim * 2
        + cfg.ffn * 6
        + e * 4
        + moe_slots(cfg) * (cfg.d_model * 6 + 12)
        + cfg.vocab * 4
        + 64;
    let g = cfg.heads / cfg.kv_heads;
    let nsplit = run
        .max_context
        .div_ceil(split_chunk(run.max_context, run.batch, cfg.kv_heads));
    let part = run.batch * cfg.kv_heads * MAX_SCRATCH * g * nsplit * (cfg.head_dim + 2) * 4;
    (kv, nmax * per_row + part + pps * run.batch * 4)
}

/// Expert slots per row of the MoE dispatch buffers (0 for a dense MLP).
fn moe_slots(cfg: &ModelConfig) -> usize {
    if cfg.experts == 0 { 0 } else { cfg.top_k }
}

/// One model on the device: weights, paged KV cache, inputs and activations.
struct GpuModel {
    cfg: ModelConfig,
    w: GpuWeights,
    seed: u64,
    batch: usize,
    nmax: usize,
    pps: usize,
    ps: usize,
    chunk: usize,
    nsplit: usize,
    /// Kernel-name suffix of the split-KV variant in use (`SPECDEC_SPLIT_VARIANT`), or empty.
    split_variant: String,
    layer_elems: usize,
    k: Buf,
    v: Buf,
    pt: Buf,
    tokens: Buf,
    pos: Buf,
    base: Buf,
    masks: Buf,
    paths: Buf,
    counts: Buf,
    x: Buf,
    h: Buf,
    qkv: Buf,
    attn: Buf,
    gu: Buf,
    act: Buf,
    router: Buf,
    /// MoE dispatch: slot -> row, then row * top_k + j -> slot (u32).
    route: Buf,
    /// MoE dispatch: the gate of each slot (f32).
    route_gate: Buf,
    /// MoE dispatch: the rows of `h` gathered per slot (bf16) and the experts' outputs (f32).
    hx: Buf,
    ybuf: Buf,
    logits: Buf,
    top: Buf,
    part_ml: Buf,
    part_acc: Buf,
}

impl GpuModel {
    fn new(
        dev: &Dev,
        w: GpuWeights,
        layers: usize,
        seed: u64,
        run: &RunConfig,
    ) -> Result<Self, EngineError> {
        let cfg = ModelConfig {
            layers,
            ..w.cfg.clone()
        };
        if cfg.head_dim != 64 && cfg.head_dim != 128 {
            return Err(EngineError::Config(format!(
                "the GPU kernels take head-dim 64 or 128, not {}",
                cfg.head_dim
            )));
        }
        if cfg.experts > 64 {
            return Err(EngineError::Config(
                "the GPU router takes at most 64 experts".into(),
            ));
        }
        let b = run.batch;
        let pps = run.max_context.div_ceil(run.page_size);
        let layer_elems = b * pps * run.page_size * cfg.kv_heads * cfg.head_dim;
        let nmax = b * run.prompt_len.max(MAX_SCRATCH);
        let e = cfg.experts.max(1);
        let g = cfg.heads / cfg.kv_heads;
        let chunk = split_chunk(run.max_context, b, cfg.kv_heads);
        let nsplit = run.max_context.div_ceil(chunk);
        let split_variant = std::env::var("SPECDEC_SPLIT_VARIANT")
            .map(|v| format!("_{v}"))
            .unwrap_or_default();
        let slots = nmax * moe_slots(&cfg);
        let nparts = b * cfg.kv_heads * MAX_SCRATCH * g * nsplit;
        let pt_host = page_table(b, run.max_context, run.page_size, seed);
        let mut pt = dev.alloc(pt_host.len() * 4)?;
        let bytes: Vec<u8> = pt_host.iter().flat_map(|p| p.to_le_bytes()).collect();
        dev.stream
            .memcpy_htod(&bytes, &mut pt.mem.slice_mut(0..bytes.len()))
            .map_err(cuda)?;
        Ok(GpuModel {
            k: dev.alloc(cfg.layers * layer_elems * 2)?,
            v: dev.alloc(cfg.layers * layer_elems * 2)?,
            pt,
            tokens: dev.alloc(nmax * 4)?,
            pos: dev.alloc(nmax * 4)?,
            base: dev.alloc(b * 4)?,
            masks: dev.alloc(MAX_SCRATCH * 8)?,
            paths: dev.alloc(b * MAX_SCRATCH * 4)?,
            counts: dev.alloc(b * 4)?,
            x: dev.alloc(nmax * cfg.d_model * 4)?,
            h: dev.alloc(nmax * cfg.d_model * 2)?,
            qkv: dev.alloc(nmax * cfg.qkv_dim() * 2)?,
            attn: dev.alloc(nmax * cfg.heads * cfg.head_dim * 2)?,
            gu: dev.alloc(nmax * cfg.ffn * 4)?,
            act: dev.alloc(nmax * cfg.ffn * 2)?,
            router: dev.alloc(nmax * e * 4)?,
            route: dev.alloc(slots * 8)?,
            route_gate: dev.alloc(slots * 4)?,
            hx: dev.alloc(slots * cfg.d_model * 2)?,
            ybuf: dev.alloc(slots * cfg.d_model * 4)?,
            logits: dev.alloc(nmax * cfg.vocab * 4)?,
            top: dev.alloc(nmax * 8 * 4)?,
            part_ml: dev.alloc(nparts * 8)?,
            part_acc: dev.alloc(nparts * cfg.head_dim * 4)?,
            cfg,
            w,
            seed,
            batch: b,
            nmax,
            pps,
            ps: run.page_size,
            chunk,
            nsplit,
            split_variant,
            layer_elems,
        })
    }

    fn upload(dev: &Dev, buf: &mut Buf, vals: &[u8]) -> Result<(), EngineError> {
        if vals.len() > buf.bytes {
            return Err(EngineError::Cuda(format!(
                "input of {} bytes does not fit its {}-byte buffer",
                vals.len(),
                buf.bytes
            )));
        }
        if vals.is_empty() {
            return Ok(());
        }
        dev.stream
            .memcpy_htod(vals, &mut buf.mem.slice_mut(0..vals.len()))
            .map_err(cuda)
    }

    fn set_inputs(&mut self, dev: &Dev, f: &Forward) -> Result<(), EngineError> {
        let n = self.batch * f.t;
        if n > self.nmax || f.tokens.len() != n || f.pos.len() != n || f.base.len() != self.batch {
            return Err(EngineError::Config(format!(
                "forward of {} rows does not fit the {} rows the buffers hold",
                n, self.nmax
            )));
        }
        if let Some(&bad) = f.tokens.iter().find(|&&t| t as usize >= self.cfg.vocab) {
            return Err(EngineError::Config(format!(
                "token {bad} is outside the vocabulary"
            )));
        }
        let le = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        Self::upload(dev, &mut self.tokens, &le(&f.tokens))?;
        Self::upload(dev, &mut self.pos, &le(&f.pos))?;
        Self::upload(dev, &mut self.base, &le(&f.base))?;
        let masks: Vec<u8> = f.masks.iter().flat_map(|x| x.to_le_bytes()).collect();
        Self::upload(dev, &mut self.masks, &masks)
    }

    /// Enqueue the attention of one layer for the rows of `f`.
    fn attention(
        &self,
        dev: &Dev,
        layer: usize,
        t: usize,
        off: usize,
        causal: bool,
        kind: VerifyAttn,
    ) -> Result<(), EngineError> {
        let c = &self.cfg;
        let hd = c.head_dim;
        let n = self.batch * t;
        let (kp, vp) = self.layer_kv(layer);
        let scale = 1.0f32 / (hd as f32).sqrt();
        let g = c.heads / c.kv_heads;
        let q = t * g;
        let split = kind == VerifyAttn::SplitKv && t <= MAX_SCRATCH;
        if split {
            let qm = SPLIT_QUERIES.into_iter().find(|&p| p >= q).unwrap_or(8);
            let qgroups = q.div_ceil(qm);
            // KV heads fastest: the blocks of one split run together and read whole cache rows.
            let grid = (
                (c.kv_heads * qgroups) as u32,
                self.nsplit as u32,
                self.batch as u32,
            );
            let mut name = format!("attn_split_{hd}_{qm}");
            let alt = format!("{name}{}", self.split_variant);
            if dev.funcs.contains_key(&alt) {
                name = alt;
            }
            launch!(
                dev,
                &name,
                grid,
                (128, 1, 1),
                self.qkv.ptr,
                kp,
                vp,
                self.base.ptr,
                self.pt.ptr,
                self.masks.ptr,
                self.part_ml.ptr,
                self.part_acc.ptr,
                t as i32,
                off as i32,
                i32::from(causal),
                c.heads as i32,
                c.kv_heads as i32,
                self.pps as i32,
                self.ps.trailing_zeros() as i32,
                scale,
                self.chunk as i32,
                self.nsplit as i32
            );
            launch!(
                dev,
                "attn_combine",
                ((n * c.heads) as u32, 1, 1),
                (128, 1, 1),
                self.part_ml.ptr,
                self.part_acc.ptr,
                self.attn.ptr,
                t as i32,
                c.heads as i32,
                c.kv_heads as i32,
                hd as i32,
                self.nsplit as i32
            );
        } else {
            let warps = n * c.heads;
            launch!(
                dev,
                &format!("attn_warp_{hd}"),
                (warps.div_ceil(4) as u32, 1, 1),
                (128, 1, 1),
                self.qkv.ptr,
                kp,
                vp,
                self.base.ptr,
                self.pt.ptr,
                self.masks.ptr,
                self.attn.ptr,
                n as i32,
                t as i32,
                off as i32,
                i32::from(causal),
                c.heads as i32,
                c.kv_heads as i32,
                self.pps as i32,
                self.ps as i32,
                scale
            );
        }
        Ok(())
    }

    fn layer_kv(&self, layer: usize) -> (u64, u64) {
        let off = (layer * self.layer_elems * 2) as u64;
        (self.k.ptr + off, self.v.ptr + off)
    }

    /// Enqueue a whole forward pass (inputs already on the device) and the top-k of its rows.
    fn enqueue(
        &self,
        dev: &Dev,
        t: usize,
        off: usize,
        causal: bool,
        k: usize,
        kind: VerifyAttn,
    ) -> Result<(), EngineError> {
        let c = &self.cfg;
        let n = self.batch * t;
        let d = c.d_model;
        let rows = (n as u32, 1, 1);
        launch!(
            dev,
            "embed",
            rows,
            (256, 1, 1),
            self.tokens.ptr,
            self.w.get("embed")?.ptr,
            self.x.ptr,
            d as i32
        );
        for l in 0..c.layers {
            let lw = self.layer_weights(l)?;
            launch!(
                dev,
                "rmsnorm",
                rows,
                (256, 1, 1),
                self.x.ptr,
                lw.attn_norm.ptr,
                self.h.ptr,
                d as i32,
                c.norm_eps
            );
            dev.gemm(
                lw.wqkv.ptr,
                self.h.ptr,
                self.qkv.ptr,
                c.qkv_dim(),
                d,
                n,
                false,
                0.0,
            )?;
            let (kp, vp) = self.layer_kv(l);
            launch!(
                dev,
                "rope_cache",
                rows,
                (128, 1, 1),
                self.qkv.ptr,
                self.pos.ptr,
                self.base.ptr,
                self.pt.ptr,
                kp,
                vp,
                t as i32,
                off as i32,
                c.heads as i32,
                c.kv_heads as i32,
                c.head_dim as i32,
                self.pps as i32,
                self.ps as i32,
                c.rope_theta
            );
            self.attention(dev, l, t, off, causal, kind)?;
            dev.gemm(
                lw.wo.ptr,
                self.attn.ptr,
                self.x.ptr,
                d,
                c.heads * c.head_dim,
                n,
                true,
                1.0,
            )?;
            launch!(
                dev,
                "rmsnorm",
                rows,
                (256, 1, 1),
                self.x.ptr,
                lw.mlp_norm.ptr,
                self.h.ptr,
                d as i32,
                c.norm_eps
            );
            let ew = ((n * c.ffn).div_ceil(256).min(4096) as u32, 1, 1);
            match &lw.mlp {
                MlpW::Dense { gate_up, down } => {
                    dev.gemm(
                        gate_up.ptr,
                        self.h.ptr,
                        self.gu.ptr,
                        2 * c.ffn,
                        d,
                        n,
                        false,
                        0.0,
                    )?;
                    launch!(
                        dev,
                        "swiglu",
                        ew,
                        (256, 1, 1),
                        self.gu.ptr,
                        self.act.ptr,
                        0u64,
                        0i32,
                        c.ffn as i32,
                        n as u64
                    );
                    dev.gemm(down.ptr, self.act.ptr, self.x.ptr, d, c.ffn, n, true, 1.0)?;
                }
                MlpW::Moe { router, experts } => {
                    dev.gemm(
                        router.ptr,
                        self.h.ptr,
                        self.router.ptr,
                        c.experts,
                        d,
                        n,
                        true,
                        0.0,
                    )?;
                    self.moe_dispatch(dev, n, experts)?;
                }
            }
        }
        launch!(
            dev,
            "rmsnorm",
            rows,
            (256, 1, 1),
            self.x.ptr,
            self.w.get("final_norm")?.ptr,
            self.h.ptr,
            d as i32,
            c.norm_eps
        );
        dev.gemm(
            self.w.get("lm_head")?.ptr,
            self.h.ptr,
            self.logits.ptr,
            c.vocab,
            d,
            n,
            true,
            0.0,
        )?;
        launch!(
            dev,
            "topk",
            rows,
            (256, 1, 1),
            self.logits.ptr,
            self.top.ptr,
            c.vocab as i32,
            k as i32
        );
        Ok(())
    }

    /// Sparse MoE: each row goes to its top-k experts only. The router logits come back to the
    /// host (the pass waits for them), which picks the experts with the CPU reference's
    /// [`moe_gates`] and groups the rows by expert; each expert then runs its two products on its
    /// own rows alone, so an expert chosen by many rows does more work and one chosen by none
    /// does nothing. The outputs are added to the residual in each row's top-k order.
    fn moe_dispatch(
        &self,
        dev: &Dev,
        n: usize,
        experts: &[(Arc<Buf>, Arc<Buf>)],
    ) -> Result<(), EngineError> {
        let c = &self.cfg;
        let (e, k, d) = (c.experts, c.top_k, c.d_model);
        let mut raw = vec![0u8; n * e * 4];
        dev.stream
            .memcpy_dtoh(&self.router.mem.slice(0..n * e * 4), &mut raw)
            .map_err(cuda)?;
        dev.stream.synchronize().map_err(cuda)?;
        let logits: Vec<f32> = raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut per_expert: Vec<Vec<(usize, usize, f32)>> = vec![Vec::new(); e];
        for r in 0..n {
            let (chosen, gates) = moe_gates(&logits[r * e..(r + 1) * e], k);
            for (j, (&x, g)) in chosen.iter().zip(gates).enumerate() {
                per_expert[x as usize].push((r, j, g));
            }
        }
        // route = [slot -> row (n*k) | row*k + j -> slot (n*k)], slots grouped by expert.
        let mut route = vec![0u32; 2 * n * k];
        let mut gate = vec![0f32; n * k];
        let mut counts = Vec::with_capacity(e);
        let mut slot = 0usize;
        for list in &per_expert {
            counts.push(list.len());
            for &(r, j, g) in list {
                route[slot] = r as u32;
                route[n * k + r * k + j] = slot as u32;
                gate[slot] = g;
                slot += 1;
            }
        }
        let route_bytes: Vec<u8> = route.iter().flat_map(|v| v.to_le_bytes()).collect();
        let gate_bytes: Vec<u8> = gate.iter().flat_map(|v| v.to_le_bytes()).collect();
        if route_bytes.len() > self.route.bytes || gate_bytes.len() > self.route_gate.bytes {
            return Err(EngineError::Cuda(format!(
                "MoE dispatch of {n} rows does not fit its buffers"
            )));
        }
        let cu = dev.stream.cu_stream();
        // SAFETY: `route` and `route_gate` are live device allocations at least this large
        // (checked above); the sources are pageable host memory, which the driver stages before
        // the call returns, so they may be dropped afterwards.
        unsafe { cudarc::driver::result::memcpy_htod_async(self.route.ptr, &route_bytes, cu) }
            .map_err(cuda)?;
        // SAFETY: as above.
        unsafe { cudarc::driver::result::memcpy_htod_async(self.route_gate.ptr, &gate_bytes, cu) }
            .map_err(cuda)?;
        launch!(
            dev,
            "moe_gather",
            ((n * k) as u32, 1, 1),
            (256, 1, 1),
            self.h.ptr,
            self.hx.ptr,
            self.route.ptr,
            d as i32
        );
        let mut first = 0usize;
        for ((gate_up, down), &cnt) in experts.iter().zip(&counts) {
            if cnt > 0 {
                dev.gemm(
                    gate_up.ptr,
                    self.hx.ptr + (first * d * 2) as u64,
                    self.gu.ptr,
                    2 * c.ffn,
                    d,
                    cnt,
                    false,
                    0.0,
                )?;
                launch!(
                    dev,
                    "swiglu",
                    ((cnt * c.ffn).div_ceil(256).min(4096) as u32, 1, 1),
                    (256, 1, 1),
                    self.gu.ptr,
                    self.act.ptr,
                    self.route_gate.ptr + (first * 4) as u64,
                    1i32,
                    c.ffn as i32,
                    cnt as u64
                );
                dev.gemm(
                    down.ptr,
                    self.act.ptr,
                    self.ybuf.ptr + (first * d * 4) as u64,
                    d,
                    c.ffn,
                    cnt,
                    true,
                    0.0,
                )?;
            }
            first += cnt;
        }
        launch!(
            dev,
            "moe_scatter",
            (n as u32, 1, 1),
            (256, 1, 1),
            self.x.ptr,
            self.ybuf.ptr,
            self.route.ptr + (n * k * 4) as u64,
            k as i32,
            d as i32
        );
        Ok(())
    }

    fn layer_weights(&self, l: usize) -> Result<LayerW, EngineError> {
        let g = |s: &str| self.w.get(&format!("layers.{l}.{s}"));
        let mlp = if self.cfg.experts == 0 {
            MlpW::Dense {
                gate_up: g("w_gate_up")?,
                down: g("w_down")?,
            }
        } else {
            let mut experts = Vec::new();
            for e in 0..self.cfg.experts {
                experts.push((
                    g(&format!("experts.{e}.w_gate_up"))?,
                    g(&format!("experts.{e}.w_down"))?,
                ));
            }
            MlpW::Moe {
                router: g("router")?,
                experts,
            }
        };
        Ok(LayerW {
            attn_norm: g("attn_norm")?,
            wqkv: g("wqkv")?,
            wo: g("wo")?,
            mlp_norm: g("mlp_norm")?,
            mlp,
        })
    }
}

/// A benchmarked product: name, weight, input, output, out dim, in dim, f32 output, count per model.
type GemmShape = (String, u64, u64, u64, usize, usize, bool, usize);

/// Timing of the microbenchmarks (GPU events, median of repetitions).
#[derive(Debug, Clone, serde::Serialize)]
pub struct GemmBench {
    pub rows: usize,
    pub tflops: f64,
    pub per_shape: Vec<(String, f64)>,
}

/// Attention kernel timing at the current context.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttnBench {
    pub kind: VerifyAttn,
    /// Split-KV kernel variant (kernel-name suffix; empty for the default) and keys per block.
    pub variant: String,
    pub chunk: usize,
    pub page_size: usize,
    pub kv_tokens: usize,
    pub ms: f64,
    pub gb_per_s: f64,
}

/// The GPU implementation of [`Backend`].
pub struct GpuBackend {
    pub dev: Rc<Dev>,
    target: GpuModel,
    draft: Option<GpuModel>,
    kind: VerifyAttn,
    use_graphs: bool,
    graphs: HashMap<(Which, usize, usize, bool, usize), CudaGraph>,
    /// GPU memory the run was sized to, bytes.
    pub needed_bytes: usize,
}

impl GpuBackend {
    /// Build the target (seeded in place, or from `target`) and the draft per `run`.
    pub fn new(
        cfg: &ModelConfig,
        target: Option<&HostWeights>,
        draft_weights: Option<&HostWeights>,
        run: &RunConfig,
    ) -> Result<Self, EngineError> {
        Self::with_dev(Rc::new(Dev::new()?), cfg, target, draft_weights, run)
    }

    /// As [`GpuBackend::new`] on an existing device (one NVRTC compile for many runs).
    pub fn with_dev(
        dev: Rc<Dev>,
        cfg: &ModelConfig,
        target: Option<&HostWeights>,
        draft_weights: Option<&HostWeights>,
        run: &RunConfig,
    ) -> Result<Self, EngineError> {
        let dcfg = match draft_weights {
            Some(w) => w.cfg.clone(),
            None => draft_config(cfg, run),
        };
        // Size everything before allocating: a clear message instead of an allocation failure.
        let (tkv, tact) = model_bytes(cfg, run);
        let (dkv, dact) = model_bytes(&dcfg, run);
        let tw = cfg.params() * 2;
        let dw = if draft_weights.is_none() && run.draft == crate::config::DraftKind::SelfSpec {
            0
        } else {
            dcfg.params() * 2
        };
        let slack = 1usize << 30;
        let needed = tkv + tact + tw + dkv + dact + dw + slack;
        let (free, _total) = dev.free_bytes()?;
        let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
        if needed > free {
            return Err(EngineError::OutOfMemory {
                needed_gib: gib(needed),
                free_gib: gib(free),
                detail: format!(
                    "weights {:.1} GiB, KV cache {:.1} GiB for {} positions x batch {}, activations {:.1} GiB",
                    gib(tw + dw),
                    gib(tkv + dkv),
                    run.max_context,
                    run.batch,
                    gib(tact + dact + slack)
                ),
            });
        }
        let tweights = match target {
            Some(w) => GpuWeights::upload(&dev, w)?,
            None => GpuWeights::seeded(&dev, cfg, run.seed)?,
        };
        let tmodel = GpuModel::new(&dev, tweights.clone(), cfg.layers, run.seed, run)?;
        let dmodel = match (draft_weights, run.draft) {
            (Some(w), _) => GpuModel::new(
                &dev,
                GpuWeights::upload(&dev, w)?,
                w.cfg.layers,
                run.seed ^ 0xd4a7,
                run,
            )?,
            (None, crate::config::DraftKind::SelfSpec) => {
                GpuModel::new(&dev, tweights, run.draft_layers, run.seed, run)?
            }
            (None, crate::config::DraftKind::Small) => {
                let w = GpuWeights::seeded(&dev, &dcfg, run.seed ^ 0xd4a7)?;
                GpuModel::new(&dev, w, dcfg.layers, run.seed ^ 0xd4a7, run)?
            }
        };
        dev.stream.synchronize().map_err(cuda)?;
        Ok(GpuBackend {
            dev,
            target: tmodel,
            draft: Some(dmodel),
            kind: run.verify_attn,
            use_graphs: run.graphs,
            graphs: HashMap::new(),
            needed_bytes: needed,
        })
    }

    fn model(&self, which: Which) -> Result<&GpuModel, EngineError> {
        match which {
            Which::Target => Ok(&self.target),
            Which::Draft => self
                .draft
                .as_ref()
                .ok_or_else(|| EngineError::Config("no draft model".into())),
        }
    }

    /// Upload inputs and run the pass (replaying or capturing a graph when enabled).
    fn run_pass(&mut self, which: Which, f: &Forward, k: usize) -> Result<(), EngineError> {
        if k == 0 || k > 8 {
            return Err(EngineError::Config(format!(
                "top-k of {k} is outside 1..=8"
            )));
        }
        {
            let dev = &self.dev;
            let m = match which {
                Which::Target => &mut self.target,
                Which::Draft => self
                    .draft
                    .as_mut()
                    .ok_or_else(|| EngineError::Config("no draft model".into()))?,
            };
            m.set_inputs(dev, f)?;
        }
        // MoE passes are not captured: their dispatch reads the router's choice on the host.
        let decode = f.t <= MAX_SCRATCH
            && !(f.causal && f.off == 0 && f.t > 8)
            && self.model(which)?.cfg.experts == 0;
        let key = (which, f.t, f.off, f.causal, k);
        if self.use_graphs && decode {
            if !self.graphs.contains_key(&key) {
                let m = self.model(which)?;
                self.dev
                    .stream
                    .begin_capture(dsys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                    .map_err(cuda)?;
                let r = m.enqueue(&self.dev, f.t, f.off, f.causal, k, self.kind);
                let g = self
                    .dev
                    .stream
                    .end_capture(dsys::CUgraphInstantiate_flags(0))
                    .map_err(cuda)?;
                r?;
                let g =
                    g.ok_or_else(|| EngineError::Cuda("graph capture produced no graph".into()))?;
                self.graphs.insert(key, g);
            }
            if let Some(g) = self.graphs.get(&key) {
                g.launch().map_err(cuda)?;
            }
        } else {
            self.model(which)?
                .enqueue(&self.dev, f.t, f.off, f.causal, k, self.kind)?;
        }
        Ok(())
    }

    /// Logits of every row of a pass (for the comparison with the CPU reference).
    pub fn logits(&mut self, which: Which, f: &Forward) -> Result<Vec<f32>, EngineError> {
        self.run_pass(which, f, 1)?;
        let m = self.model(which)?;
        let n = m.batch * f.t * m.cfg.vocab;
        let mut out = vec![0u8; n * 4];
        self.dev
            .stream
            .memcpy_dtoh(&m.logits.mem.slice(0..n * 4), &mut out)
            .map_err(cuda)?;
        self.dev.stream.synchronize().map_err(cuda)?;
        Ok(out
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// bf16 matrix-product rate of the target's prefill shapes at `rows` rows (cuBLAS, events).
    pub fn bench_gemm(&mut self, rows: usize, reps: usize) -> Result<GemmBench, EngineError> {
        let m = &self.target;
        let c = m.cfg.clone();
        let rows = rows.min(m.nmax);
        let lw = m.layer_weights(0)?;
        let head = m.w.get("lm_head")?;
        let mut shapes: Vec<GemmShape> = vec![
            (
                "qkv".into(),
                lw.wqkv.ptr,
                m.h.ptr,
                m.qkv.ptr,
                c.qkv_dim(),
                c.d_model,
                false,
                c.layers,
            ),
            (
                "o".into(),
                lw.wo.ptr,
                m.attn.ptr,
                m.x.ptr,
                c.d_model,
                c.heads * c.head_dim,
                true,
                c.layers,
            ),
            (
                "lm_head".into(),
                head.ptr,
                m.h.ptr,
                m.logits.ptr,
                c.vocab,
                c.d_model,
                true,
                1,
            ),
        ];
        if let MlpW::Dense { gate_up, down } = &lw.mlp {
            shapes.push((
                "gate_up".into(),
                gate_up.ptr,
                m.h.ptr,
                m.gu.ptr,
                2 * c.ffn,
                c.d_model,
                false,
                c.layers,
            ));
            shapes.push((
                "down".into(),
                down.ptr,
                m.act.ptr,
                m.x.ptr,
                c.d_model,
                c.ffn,
                true,
                c.layers,
            ));
        }
        let (mut flops, mut secs) = (0.0f64, 0.0f64);
        let mut per = Vec::new();
        for (name, w, x, y, out, inp, f32o, count) in shapes {
            let dev = &self.dev;
            let t = time_ms(dev, reps, || dev.gemm(w, x, y, out, inp, rows, f32o, 0.0))?;
            let fl = 2.0 * out as f64 * inp as f64 * rows as f64;
            per.push((name, fl / (t * 1e-3) / 1e12));
            flops += fl * count as f64;
            secs += t * 1e-3 * count as f64;
        }
        Ok(GemmBench {
            rows,
            tflops: flops / secs / 1e12,
            per_shape: per,
        })
    }

    /// Use the split-KV kernel variant `v` (kernel-name suffix without `_`; empty for the
    /// default) for the target from now on; returns the previous one. A benchmark knob.
    pub fn set_split_variant(&mut self, v: &str) -> String {
        let new = if v.is_empty() {
            String::new()
        } else {
            format!("_{v}")
        };
        let prev = std::mem::replace(&mut self.target.split_variant, new);
        prev.trim_start_matches('_').to_string()
    }

    /// Time the decode attention of layer 0 for a verify-shaped pass `f` (inputs are uploaded).
    pub fn bench_attention(
        &mut self,
        f: &Forward,
        kind: VerifyAttn,
        reps: usize,
    ) -> Result<AttnBench, EngineError> {
        {
            let dev = &self.dev;
            self.target.set_inputs(dev, f)?;
        }
        let m = &self.target;
        let dev = &self.dev;
        let ms = time_ms(dev, reps, || {
            m.attention(dev, 0, f.t, f.off, f.causal, kind)
        })?;
        let kv_tokens: usize = f.base.iter().map(|&b| b as usize + f.off + f.t).sum();
        let bytes = kv_tokens * m.cfg.kv_heads * m.cfg.head_dim * 2 * 2;
        Ok(AttnBench {
            kind,
            variant: m.split_variant.trim_start_matches('_').to_string(),
            chunk: m.chunk,
            page_size: m.ps,
            kv_tokens,
            ms,
            gb_per_s: bytes as f64 / (ms * 1e-3) / 1e9,
        })
    }

    /// GPU time of one whole forward pass, ms (median), for the host-gap comparison.
    pub fn time_forward(
        &mut self,
        which: Which,
        f: &Forward,
        reps: usize,
    ) -> Result<f64, EngineError> {
        self.run_pass(which, f, 1)?;
        {
            let dev = &self.dev;
            let m = match which {
                Which::Target => &mut self.target,
                Which::Draft => self
                    .draft
                    .as_mut()
                    .ok_or_else(|| EngineError::Config("no draft model".into()))?,
            };
            m.set_inputs(dev, f)?;
        }
        let m = self.model(which)?;
        let dev = &self.dev;
        let kind = self.kind;
        time_ms(dev, reps, || m.enqueue(dev, f.t, f.off, f.causal, 1, kind))
    }
}

/// Median time of `reps` runs of `f` after 3 warm-ups, GPU events, ms.
fn time_ms(
    dev: &Dev,
    reps: usize,
    mut f: impl FnMut() -> Result<(), EngineError>,
) -> Result<f64, EngineError> {
    for _ in 0..3 {
        f()?;
    }
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let a = dev
            .stream
            .record_event(Some(dsys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda)?;
        f()?;
        let b = dev
            .stream
            .record_event(Some(dsys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda)?;
        b.synchronize().map_err(cuda)?;
        v.push(f64::from(a.elapsed_ms(&b).map_err(cuda)?));
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

impl Backend for GpuBackend {
    fn forward(&mut self, which: Which, f: &Forward, k: usize) -> Result<Vec<u32>, EngineError> {
        self.run_pass(which, f, k)?;
        let m = self.model(which)?;
        let n = m.batch * f.t * k;
        let mut out = vec![0u8; n * 4];
        self.dev
            .stream
            .memcpy_dtoh(&m.top.mem.slice(0..n * 4), &mut out)
            .map_err(cuda)?;
        self.dev.stream.synchronize().map_err(cuda)?;
        Ok(out
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn commit(
        &mut self,
        which: Which,
        base: &[u32],
        paths: &[Vec<u32>],
    ) -> Result<(), EngineError> {
        if paths
            .iter()
            .all(|p| p.iter().enumerate().all(|(j, &s)| s as usize == j))
        {
            return Ok(()); // a chain: accepted K/V are already in place
        }
        let dev = &self.dev;
        let m = match which {
            Which::Target => &mut self.target,
            Which::Draft => self
                .draft
                .as_mut()
                .ok_or_else(|| EngineError::Config("no draft model".into()))?,
        };
        let mut flat = vec![0u32; m.batch * MAX_SCRATCH];
        for (b, p) in paths.iter().enumerate() {
            flat[b * MAX_SCRATCH..b * MAX_SCRATCH + p.len()].copy_from_slice(p);
        }
        let counts: Vec<u32> = paths.iter().map(|p| p.len() as u32).collect();
        let le = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        GpuModel::upload(dev, &mut m.paths, &le(&flat))?;
        GpuModel::upload(dev, &mut m.counts, &le(&counts))?;
        GpuModel::upload(dev, &mut m.base, &le(base))?;
        let m = self.model(which)?;
        launch!(
            self.dev,
            "kv_commit",
            (m.cfg.layers as u32, m.batch as u32, 1),
            (128, 1, 1),
            m.k.ptr,
            m.v.ptr,
            m.base.ptr,
            m.pt.ptr,
            m.paths.ptr,
            m.counts.ptr,
            m.layer_elems as i64,
            m.cfg.kv_heads as i32,
            m.cfg.head_dim as i32,
            m.pps as i32,
            m.ps as i32
        );
        Ok(())
    }

    fn fill_background(&mut self, which: Which, context: usize) -> Result<(), EngineError> {
        let m = self.model(which)?;
        for l in 0..m.cfg.layers {
            let (kp, vp) = m.layer_kv(l);
            launch!(
                self.dev,
                "fill_background",
                (4096, 1, 1),
                (256, 1, 1),
                kp,
                vp,
                m.pt.ptr,
                m.pps as i32,
                m.ps as i32,
                m.batch as i32,
                context as i32,
                m.cfg.kv_heads as i32,
                m.cfg.head_dim as i32,
                background_key(m.seed, l, false),
                background_key(m.seed, l, true)
            );
        }
        Ok(())
    }

    fn has_draft(&self) -> bool {
        self.draft.is_some()
    }

    fn sync(&mut self) -> Result<(), EngineError> {
        self.dev.stream.synchronize().map_err(cuda)
    }
}
