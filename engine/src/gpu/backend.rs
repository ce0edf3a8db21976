//! [`GpuBackend`]: the target and the draft model on one device behind [`Backend`], with the
//! memory check made before any allocation, and the capture and replay of CUDA graphs.
#![allow(unsafe_code)] // reason: the commit and background kernel launches are FFI.

use std::collections::HashMap;
use std::rc::Rc;

use cudarc::driver::{CudaGraph, sys as dsys};

use super::device::Dev;
use super::forward::Pass;
use super::model::{
    GpuModel, ModelBytes, le_bytes, level_base_at, level_masks_at, level_stride, model_bytes,
};
use super::weights::GpuWeights;
use crate::config::{DraftKind, MAX_SCRATCH, ModelConfig, RunConfig, VerifyAttn, draft_config};
use crate::weights::{HostWeights, background_key};
use crate::{Backend, EngineError, Forward, GpuError, Which, levels_on_host};

/// Seed offset of a draft model with weights of its own.
const DRAFT_SEED: u64 = 0xd4a7;
/// Memory kept free beyond what the run's buffers need.
const SLACK_BYTES: usize = 1 << 30;

/// A captured pass shape: model, tokens per sequence, scratch offset, causal, top-k.
type GraphKey = (Which, usize, usize, bool, usize);

/// A captured chain of draft levels: model, top tokens per sequence of the pass before the
/// first level, and each level's scratch offset (every level has `width` tokens and top-1).
type ChainKey = (Which, usize, usize, Vec<usize>);

/// The GPU implementation of [`Backend`].
pub struct GpuBackend {
    pub dev: Rc<Dev>,
    pub(super) target: GpuModel,
    pub(super) draft: Option<GpuModel>,
    pub(super) kind: VerifyAttn,
    use_graphs: bool,
    graphs: HashMap<GraphKey, CudaGraph>,
    chains: HashMap<ChainKey, CudaGraph>,
    /// GPU memory the run was sized to, bytes.
    pub needed_bytes: usize,
}

/// Bytes the whole run needs (both models, weights, slack), or the error saying how much is
/// missing.
fn check_memory(
    dev: &Dev,
    cfg: &ModelConfig,
    dcfg: &ModelConfig,
    shared_weights: bool,
    run: &RunConfig,
) -> Result<usize, GpuError> {
    let ModelBytes {
        kv_cache: tkv,
        activations: tact,
    } = model_bytes(cfg, run, dev.sm_count);
    let ModelBytes {
        kv_cache: dkv,
        activations: dact,
    } = model_bytes(dcfg, run, dev.sm_count);
    let tw = cfg.params() * 2;
    let dw = if shared_weights { 0 } else { dcfg.params() * 2 };
    let needed = tkv + tact + tw + dkv + dact + dw + SLACK_BYTES;
    let (free, _total) = dev.free_bytes()?;
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    if needed > free {
        return Err(GpuError::OutOfMemory {
            needed_gib: gib(needed),
            free_gib: gib(free),
            weights_gib: gib(tw + dw),
            kv_gib: gib(tkv + dkv),
            positions: run.max_context,
            batch: run.batch,
            activations_gib: gib(tact + dact + SLACK_BYTES),
        });
    }
    Ok(needed)
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
        let shared = draft_weights.is_none() && run.draft == DraftKind::SelfSpec;
        let needed = check_memory(&dev, cfg, &dcfg, shared, run)?;
        let tweights = match target {
            Some(w) => GpuWeights::upload(&dev, w)?,
            None => GpuWeights::seeded(&dev, cfg, run.seed)?,
        };
        let tmodel = GpuModel::new(&dev, tweights.clone(), cfg.layers, run.seed, run)?;
        let dseed = run.seed ^ DRAFT_SEED;
        let dmodel = match (draft_weights, run.draft) {
            (Some(w), _) => {
                let dw = GpuWeights::upload(&dev, w)?;
                GpuModel::new(&dev, dw, w.cfg.layers, dseed, run)?
            }
            (None, DraftKind::SelfSpec) => {
                GpuModel::new(&dev, tweights, run.draft_layers, run.seed, run)?
            }
            (None, DraftKind::Small) => {
                let w = GpuWeights::seeded(&dev, &dcfg, dseed)?;
                GpuModel::new(&dev, w, dcfg.layers, dseed, run)?
            }
        };
        dev.stream
            .synchronize()
            .map_err(GpuError::driver("setting up the models"))?;
        Ok(GpuBackend {
            dev,
            target: tmodel,
            draft: Some(dmodel),
            kind: run.verify_attn,
            use_graphs: run.graphs,
            graphs: HashMap::new(),
            chains: HashMap::new(),
            needed_bytes: needed,
        })
    }

    pub(super) fn model(&self, which: Which) -> Result<&GpuModel, EngineError> {
        match which {
            Which::Target => Ok(&self.target),
            Which::Draft => self.draft.as_ref().ok_or(EngineError::NoDraft),
        }
    }

    /// The device and model `which`, the model mutable.
    fn dev_and_model(&mut self, which: Which) -> Result<(&Dev, &mut GpuModel), EngineError> {
        let m = match which {
            Which::Target => &mut self.target,
            Which::Draft => self.draft.as_mut().ok_or(EngineError::NoDraft)?,
        };
        Ok((&self.dev, m))
    }

    /// Copy the inputs of `f` into the buffers of model `which`.
    pub(super) fn set_inputs(&mut self, which: Which, f: &Forward) -> Result<(), EngineError> {
        let (dev, m) = self.dev_and_model(which)?;
        m.set_inputs(dev, f)?;
        Ok(())
    }

    /// Upload inputs and run the pass (replaying or capturing a graph when enabled).
    pub(super) fn run_pass(
        &mut self,
        which: Which,
        f: &Forward,
        k: usize,
    ) -> Result<(), EngineError> {
        if k == 0 || k > 8 {
            return Err(GpuError::TopK { k }.into());
        }
        self.set_inputs(which, f)?;
        let pass = Pass {
            t: f.t,
            off: f.off,
            causal: f.causal,
            k,
            kind: self.kind,
        };
        // MoE passes are not captured: their dispatch reads the router's choice on the host.
        let decode = f.t <= MAX_SCRATCH
            && !(f.causal && f.off == 0 && f.t > 8)
            && self.model(which)?.cfg.experts == 0;
        if !(self.use_graphs && decode) {
            return self.model(which)?.enqueue(&self.dev, pass);
        }
        let key = (which, f.t, f.off, f.causal, k);
        if !self.graphs.contains_key(&key) {
            let g = self.capture(which, pass)?;
            self.graphs.insert(key, g);
        }
        if let Some(g) = self.graphs.get(&key) {
            g.launch()
                .map_err(GpuError::driver("launching a CUDA graph"))?;
        }
        Ok(())
    }

    /// Capture what `enqueue` puts on the stream into a CUDA graph (nothing runs until it is
    /// launched).
    fn capture_with(
        &self,
        enqueue: impl FnOnce() -> Result<(), EngineError>,
    ) -> Result<CudaGraph, EngineError> {
        self.dev
            .stream
            .begin_capture(dsys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(GpuError::driver("starting a graph capture"))?;
        let r = enqueue();
        // End the capture whatever the enqueue gave, so that the stream is usable again.
        let g = self
            .dev
            .stream
            .end_capture(dsys::CUgraphInstantiate_flags(0))
            .map_err(GpuError::driver("ending a graph capture"))?;
        r?;
        Ok(g.ok_or(GpuError::NoGraph)?)
    }

    /// Capture one pass of model `which` into a CUDA graph.
    fn capture(&self, which: Which, pass: Pass) -> Result<CudaGraph, EngineError> {
        let m = self.model(which)?;
        self.capture_with(|| m.enqueue(&self.dev, pass))
    }

    /// Whether [`Backend::draft_levels`] can run `levels` as one graph fed on the device: graphs
    /// on, a dense model, every level `w` tokens wide with its inputs shaped for the buffers.
    fn can_chain(&self, which: Which, first: &Forward, k_first: usize, levels: &[Forward]) -> bool {
        let Some(w) = levels.first().map(|l| l.t) else {
            return false;
        };
        let Ok(m) = self.model(which) else {
            return false;
        };
        let batch = m.batch;
        self.use_graphs
            && m.cfg.experts == 0
            && levels.len() < MAX_SCRATCH
            && (1..=8).contains(&w)
            && first.t * k_first >= w
            && levels.iter().all(|l| {
                l.t == w
                    && !l.causal
                    && l.off + w <= MAX_SCRATCH
                    && l.pos.len() == batch * w
                    && l.base.len() == batch
                    && l.masks.len() == w
            })
    }

    /// Stage every level's positions, bases and masks on the device in one upload.
    fn stage_levels(&mut self, which: Which, levels: &[Forward]) -> Result<(), EngineError> {
        let (dev, m) = self.dev_and_model(which)?;
        let stride = level_stride(m.batch);
        let mut bytes = vec![0u8; levels.len() * stride];
        for (l, out) in levels.iter().zip(bytes.chunks_exact_mut(stride)) {
            let put = |out: &mut [u8], at: usize, raw: Vec<u8>| {
                out[at..at + raw.len()].copy_from_slice(&raw);
            };
            put(out, 0, le_bytes(&l.pos));
            put(out, level_base_at(m.batch), le_bytes(&l.base));
            let masks = l.masks.iter().flat_map(|x| x.to_le_bytes()).collect();
            put(out, level_masks_at(m.batch), masks);
        }
        dev.upload(&mut m.stage, &bytes)?;
        Ok(())
    }

    /// Capture the levels of a draft: per level, `draft_feed` from the pass before, then the
    /// pass; a last `draft_feed` keeps the last level's tokens.
    fn capture_chain(
        &self,
        which: Which,
        prev_block: usize,
        levels: &[Forward],
    ) -> Result<CudaGraph, EngineError> {
        let m = self.model(which)?;
        let w = levels.first().map_or(1, |l| l.t);
        let (batch, stride) = (m.batch, level_stride(m.batch));
        self.capture_with(|| {
            for i in 0..=levels.len() {
                let feed = i < levels.len();
                let block = if i == 0 { prev_block } else { w };
                let st = m.stage.ptr + (i.min(levels.len().saturating_sub(1)) * stride) as u64;
                launch!(
                    self.dev,
                    "draft_feed",
                    (1, 1, 1),
                    (256, 1, 1),
                    m.top.ptr,
                    block as i32,
                    w as i32,
                    batch as i32,
                    m.keep.ptr + (i * batch * 8 * 4) as u64,
                    i32::from(feed),
                    m.tokens.ptr,
                    st,
                    m.pos.ptr,
                    st + level_base_at(batch) as u64,
                    m.base.ptr,
                    st + level_masks_at(batch) as u64,
                    m.masks.ptr
                );
                if let Some(l) = levels.get(i) {
                    let pass = Pass {
                        t: w,
                        off: l.off,
                        causal: false,
                        k: 1,
                        kind: self.kind,
                    };
                    m.enqueue(&self.dev, pass)?;
                }
            }
            Ok(())
        })
    }

    /// Copy `n` little-endian 4-byte values from the start of `buf` to the host (and wait).
    fn read_back(&self, buf: &super::device::Buf, n: usize) -> Result<Vec<[u8; 4]>, GpuError> {
        let mut out = vec![0u8; n * 4];
        self.dev
            .stream
            .memcpy_dtoh(&buf.mem.slice(0..n * 4), &mut out)
            .map_err(GpuError::driver("copying results to the host"))?;
        self.dev
            .stream
            .synchronize()
            .map_err(GpuError::driver("waiting for the pass"))?;
        Ok(out
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect())
    }

    /// Logits of every row of a pass (for the comparison with the CPU reference).
    pub fn logits(&mut self, which: Which, f: &Forward) -> Result<Vec<f32>, EngineError> {
        self.run_pass(which, f, 1)?;
        let m = self.model(which)?;
        let n = m.batch * f.t * m.cfg.vocab;
        let raw = self.read_back(&m.logits, n)?;
        Ok(raw.into_iter().map(f32::from_le_bytes).collect())
    }
}

impl Backend for GpuBackend {
    fn forward(&mut self, which: Which, f: &Forward, k: usize) -> Result<Vec<u32>, EngineError> {
        self.run_pass(which, f, k)?;
        let m = self.model(which)?;
        let n = m.batch * f.t * k;
        let raw = self.read_back(&m.top, n)?;
        Ok(raw.into_iter().map(u32::from_le_bytes).collect())
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
        let (dev, m) = self.dev_and_model(which)?;
        let mut flat = vec![0u32; m.batch * MAX_SCRATCH];
        for (b, p) in paths.iter().enumerate() {
            flat[b * MAX_SCRATCH..b * MAX_SCRATCH + p.len()].copy_from_slice(p);
        }
        let counts: Vec<u32> = paths.iter().map(|p| p.len() as u32).collect();
        dev.upload(&mut m.paths, &le_bytes(&flat))?;
        dev.upload(&mut m.counts, &le_bytes(&counts))?;
        dev.upload(&mut m.base, &le_bytes(base))?;
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

    /// With graphs on, the levels run as one captured graph after the first pass: each level's
    /// tokens are taken from the pass before on the device (`draft_feed`), so the host enqueues
    /// the whole draft and waits once, instead of a read-back and an upload between levels.
    fn draft_levels(
        &mut self,
        which: Which,
        first: &Forward,
        k_first: usize,
        levels: &[Forward],
    ) -> Result<Vec<Vec<u32>>, EngineError> {
        if !self.can_chain(which, first, k_first, levels) {
            return levels_on_host(self, which, first, k_first, levels);
        }
        self.run_pass(which, first, k_first)?;
        self.stage_levels(which, levels)?;
        let prev_block = first.t * k_first;
        let key = (
            which,
            prev_block,
            levels[0].t,
            levels.iter().map(|l| l.off).collect(),
        );
        if !self.chains.contains_key(&key) {
            let g = self.capture_chain(which, prev_block, levels)?;
            self.chains.insert(key.clone(), g);
        }
        if let Some(g) = self.chains.get(&key) {
            g.launch()
                .map_err(GpuError::driver("launching a CUDA graph"))?;
        }
        let m = self.model(which)?;
        let (batch, w) = (m.batch, levels[0].t);
        let raw = self.read_back(&m.keep, (levels.len() + 1) * batch * 8)?;
        let vals: Vec<u32> = raw.into_iter().map(u32::from_le_bytes).collect();
        Ok(vals
            .chunks_exact(batch * 8)
            .map(|c| c[..batch * w].to_vec())
            .collect())
    }

    fn has_draft(&self) -> bool {
        self.draft.is_some()
    }

    fn sync(&mut self) -> Result<(), EngineError> {
        self.dev
            .stream
            .synchronize()
            .map_err(GpuError::driver("waiting for the stream"))?;
        Ok(())
    }
}
