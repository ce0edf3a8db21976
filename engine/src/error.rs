//! The engine's errors: one enum per part (configuration, weights, GPU), gathered in
//! [`EngineError`].
//!
//! Each message says what happened and, where the user can act, what to do. A message never
//! repeats its cause: an error that wraps another library's error (`std::io`, safetensors,
//! serde_json, the CUDA driver, cuBLAS, NVRTC) carries it as `#[source]`, and a program printing
//! the error walks the chain (`specdec` prints `what: cause`). Where the fix comes after the
//! cause, [`EngineError::hint`] holds it.

use std::path::PathBuf;

use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;
use cudarc::nvrtc::CompileError;

/// Any error of the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Weights(#[from] WeightsError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// A backend was asked for a draft pass but holds no draft model.
    #[error("this backend has no draft model")]
    NoDraft,
    /// A draft level was given more tokens per sequence than the pass before it produced.
    #[error("a draft level takes {needed} tokens per sequence but the pass before it gave {have}")]
    LevelShape { needed: usize, have: usize },
}

impl EngineError {
    /// What to do about an error whose cause ends its message (`None`: the message says it).
    pub fn hint(&self) -> Option<String> {
        match self {
            EngineError::Weights(WeightsError::Read { path, .. }) => Some(format!(
                "write one with `specdec save-weights --out {}` or drop --weights for seeded \
                 weights",
                path.display()
            )),
            EngineError::Weights(WeightsError::NotSafetensors { .. }) => {
                Some("write one with `specdec save-weights`".into())
            }
            EngineError::Gpu(GpuError::DeviceQuery { .. }) => Some("check nvidia-smi".into()),
            _ => None,
        }
    }
}

/// Sizes and knobs that cannot work, found before any GPU work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown preset `{name}`: use tiny, small, 0.5b, 7b-8l, 7b or 8b-gqa-8l")]
    UnknownPreset { name: String },
    #[error("cannot read --config {path}")]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--config {path} is not a valid model configuration")]
    ParseConfig {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("layers, d-model, heads and ffn must be at least 1")]
    ZeroSize,
    #[error("vocab must be at least 2")]
    VocabTooSmall,
    #[error("heads ({heads}) must be a multiple of kv-heads ({kv_heads})")]
    KvHeads { heads: usize, kv_heads: usize },
    #[error("head-dim ({head_dim}) must be even")]
    OddHeadDim { head_dim: usize },
    #[error("top-k ({top_k}) must be between 1 and the number of experts ({experts})")]
    TopK { top_k: usize, experts: usize },
    /// `flag` is the option's spelling, e.g. `--batch`.
    #[error("{flag} must be at least 1")]
    Zero { flag: &'static str },
    #[error("--page-size {page_size} is not one of 1, 16, 64")]
    PageSize { page_size: usize },
    #[error("--depth must be at least 1 and --width between 1 and 8")]
    TreeShape,
    #[error(
        "a tree of width {width} and depth {depth} has {nodes} nodes; at most {max} fit the \
         64-bit tree mask: lower --width or --depth"
    )]
    TreeTooBig {
        width: usize,
        depth: usize,
        nodes: usize,
        max: usize,
    },
    #[error(
        "--prompt-len ({prompt_len}) must be at least --depth ({depth}): the draft re-reads up \
         to depth tokens"
    )]
    PromptShorterThanDepth { prompt_len: usize, depth: usize },
    #[error("--draft-layers {draft_layers} is more than the target's {layers} layers")]
    DraftLayers { draft_layers: usize, layers: usize },
    #[error(
        "the target has 1 layer, so a self-speculative draft would be the whole model: use \
         --draft small, a target with more layers (--layers), or --draft-layers 1 to run a draft \
         identical to the target"
    )]
    DraftIsTarget,
    #[error(
        "the run needs {needed} KV positions per sequence (context + prompt + new tokens + 64 \
         scratch), more than --max-context {max}: raise --max-context or lower \
         --context/--prompt-len/--new-tokens"
    )]
    ContextTooLong { needed: usize, max: usize },
    #[error("the draft's vocabulary ({draft}) differs from the target's ({target})")]
    DraftVocab { draft: usize, target: usize },
}

/// Weights that cannot be read, written or used.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    #[error("cannot read weights file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid safetensors file")]
    NotSafetensors {
        path: PathBuf,
        #[source]
        source: safetensors::SafeTensorError,
    },
    #[error("{path}: its specdec_config metadata is not a valid model configuration")]
    BadMetadata {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path} has no specdec_config metadata: pass the sizes with --config FILE or --preset")]
    NoMetadata { path: PathBuf },
    #[error("{path} has no tensor `{name}` (expected shape {shape:?})")]
    MissingInFile {
        path: PathBuf,
        name: String,
        shape: Vec<usize>,
    },
    #[error("{path}: tensor `{name}` has shape {shape:?}, expected {expected:?}")]
    Shape {
        path: PathBuf,
        name: String,
        shape: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("{path}: tensor `{name}` is {dtype:?}; specdec reads bf16, f16 or f32")]
    Dtype {
        path: PathBuf,
        name: String,
        dtype: safetensors::Dtype,
    },
    #[error("{path}: tensor `{name}` holds NaN or infinite values")]
    NonFinite { path: PathBuf, name: String },
    #[error("no tensor `{name}` in the weights")]
    Missing { name: String },
    #[error("cannot build tensor `{name}`")]
    Build {
        name: String,
        #[source]
        source: safetensors::SafeTensorError,
    },
    #[error("cannot encode the model configuration")]
    EncodeConfig {
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: safetensors::SafeTensorError,
    },
}

/// The GPU is missing, refuses the run, or a CUDA call failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no NVIDIA driver found (libcuda.so could not be loaded): run on a machine with an \
         NVIDIA GPU and its driver, or pass --backend cpu to run the f32 CPU reference on a \
         small model"
    )]
    NoDriver,
    /// `lib` is the file name, e.g. `libcublas.so`.
    #[error(
        "{lib} (CUDA 13) could not be loaded: install the CUDA toolkit or add its lib64 folder \
         to LD_LIBRARY_PATH"
    )]
    NoLibrary { lib: &'static str },
    #[error("the NVIDIA driver is there but reports no usable GPU")]
    DeviceQuery {
        #[source]
        source: DriverError,
    },
    #[error("the NVIDIA driver reports no GPU: check nvidia-smi")]
    NoDevice,
    /// `what` says what the engine was doing, e.g. `allocating device memory`.
    #[error("CUDA error while {what}")]
    Driver {
        what: &'static str,
        #[source]
        source: DriverError,
    },
    #[error("CUDA error while launching kernel `{kernel}`")]
    Launch {
        kernel: String,
        #[source]
        source: DriverError,
    },
    #[error("NVRTC could not compile the kernels")]
    Compile {
        #[source]
        source: CompileError,
    },
    /// `call` is the cuBLAS function, e.g. `cublasGemmEx`.
    #[error("cuBLAS: {call} failed")]
    Cublas {
        call: &'static str,
        #[source]
        source: CublasError,
    },
    #[error("kernel `{name}` is not in the compiled module")]
    MissingKernel { name: String },
    #[error("no tensor `{name}` on the device")]
    MissingTensor { name: String },
    #[error("CUDA graph capture produced no graph")]
    NoGraph,
    #[error("the GPU kernels take head-dim 64 or 128, not {head_dim}")]
    HeadDim { head_dim: usize },
    #[error("the GPU router takes at most 64 experts, not {experts}")]
    TooManyExperts { experts: usize },
    #[error("top-k of {k} is outside 1..=8")]
    TopK { k: usize },
    #[error("forward of {rows} rows does not fit the {capacity} rows the buffers hold")]
    PassTooLarge { rows: usize, capacity: usize },
    #[error("token {token} is outside the vocabulary")]
    TokenOutOfVocab { token: u32 },
    #[error("input of {bytes} bytes does not fit its {capacity}-byte buffer")]
    InputTooLarge { bytes: usize, capacity: usize },
    #[error(
        "the run needs {needed_gib:.1} GiB of GPU memory (weights {weights_gib:.1} GiB, KV cache \
         {kv_gib:.1} GiB for {positions} positions x batch {batch}, activations \
         {activations_gib:.1} GiB), the GPU has {free_gib:.1} GiB free: lower --context, --batch, \
         --prompt-len or the model size"
    )]
    OutOfMemory {
        needed_gib: f64,
        free_gib: f64,
        weights_gib: f64,
        kv_gib: f64,
        positions: usize,
        batch: usize,
        activations_gib: f64,
    },
}

impl GpuError {
    /// A driver error, with what the engine was doing (no allocation until it fails: this
    /// sits on the decode path).
    pub fn driver(what: &'static str) -> impl FnOnce(DriverError) -> GpuError {
        move |source| GpuError::Driver { what, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages the H200 printed before the errors became typed read the same now.
    #[test]
    fn messages_kept_their_wording() {
        let oom = GpuError::OutOfMemory {
            needed_gib: 4196.5,
            free_gib: 139.2,
            weights_gib: 12.6,
            kv_gib: 4151.5,
            positions: 1_000_256,
            batch: 8,
            activations_gib: 32.5,
        };
        assert_eq!(
            oom.to_string(),
            "the run needs 4196.5 GiB of GPU memory (weights 12.6 GiB, KV cache 4151.5 GiB for \
             1000256 positions x batch 8, activations 32.5 GiB), the GPU has 139.2 GiB free: \
             lower --context, --batch, --prompt-len or the model size"
        );
        let long = ConfigError::ContextTooLong {
            needed: 70256,
            max: 65536,
        };
        assert_eq!(
            long.to_string(),
            "the run needs 70256 KV positions per sequence (context + prompt + new tokens + 64 \
             scratch), more than --max-context 65536: raise --max-context or lower \
             --context/--prompt-len/--new-tokens"
        );
        let tree = ConfigError::TreeTooBig {
            width: 8,
            depth: 8,
            nodes: 65,
            max: 64,
        };
        assert_eq!(
            tree.to_string(),
            "a tree of width 8 and depth 8 has 65 nodes; at most 64 fit the 64-bit tree mask: \
             lower --width or --depth"
        );
    }

    /// An error that wraps another keeps it as its source and does not repeat it.
    #[test]
    fn sources_are_chained_not_repeated() {
        use std::error::Error as _;
        let e = EngineError::from(GpuError::DeviceQuery {
            source: DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE),
        });
        assert_eq!(
            e.to_string(),
            "the NVIDIA driver is there but reports no usable GPU"
        );
        assert!(e.source().is_some());
        assert_eq!(e.hint().as_deref(), Some("check nvidia-smi"));
        assert!(EngineError::NoDraft.hint().is_none());
    }
}
