//! Model weights: the list of tensors a configuration has, seeded deterministic values, and
//! safetensors files (read and write).
//!
//! The seeded values come from a counter-based hash (`uniform`), so the GPU can generate the
//! same numbers in place (see `gpu/kernels.cu`, `init_uniform`) without a host copy of a
//! multi-gigabyte model. Every value is rounded to bf16, the precision the GPU stores, so the
//! CPU reference and the GPU start from identical weights.

use std::collections::HashMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use crate::config::ModelConfig;
use crate::{EngineError, WeightsError};

/// 64-bit finaliser of MurmurHash3; the GPU kernels carry the same function.
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// Uniform value in [-1, 1) for element `idx` of the stream `key` (exact in f32: 24 bits).
pub fn uniform(key: u64, idx: u64) -> f32 {
    let h = mix64(key ^ idx);
    ((h >> 40) as f32) * (1.0 / 16_777_216.0) * 2.0 - 1.0
}

/// Round to bf16 and back (round to nearest even), as the GPU stores values.
pub fn bf16_round(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

/// The stream key of one named tensor of a model seeded with `seed`.
pub fn tensor_key(seed: u64, name: &str) -> u64 {
    // FNV-1a of the name: stable across runs and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ h)
}

/// Seeded value: `uniform * scale + offset`, rounded to bf16, in the order the GPU computes it.
pub fn seeded_value(key: u64, idx: u64, scale: f32, offset: f32) -> f32 {
    bf16_round(uniform(key, idx) * scale + offset)
}

/// Key of the seeded background K (or V) of one layer.
pub fn background_key(seed: u64, layer: usize, is_v: bool) -> u64 {
    mix64(seed ^ 0x6b76_6361_6368_6500 ^ ((layer as u64) << 8) ^ u64::from(is_v))
}

/// Index of one background element; the same formula is in `fill_background` on the GPU.
pub fn background_index(
    b: usize,
    pos: usize,
    h: usize,
    kv_heads: usize,
    d: usize,
    hd: usize,
) -> u64 {
    ((b as u64) << 40) | (((pos * kv_heads + h) * hd + d) as u64)
}

/// Name, shape and seeded initialisation of one tensor.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub scale: f32,
    pub offset: f32,
}

impl TensorSpec {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

impl ModelConfig {
    /// Number of weight parameters: those of [`tensor_specs`].
    pub fn params(&self) -> usize {
        tensor_specs(self).iter().map(|t| t.numel()).sum()
    }
}

/// Every tensor of a model, in a fixed order.
pub fn tensor_specs(cfg: &ModelConfig) -> Vec<TensorSpec> {
    let d = cfg.d_model;
    let inv = |n: usize| 1.0 / (n as f32).sqrt();
    let mut v = Vec::new();
    let mut push = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        v.push(TensorSpec {
            name,
            shape,
            scale,
            offset,
        })
    };
    push("embed".into(), vec![cfg.vocab, d], 1.0, 0.0);
    for l in 0..cfg.layers {
        push(format!("layers.{l}.attn_norm"), vec![d], 0.1, 1.0);
        push(
            format!("layers.{l}.wqkv"),
            vec![cfg.qkv_dim(), d],
            inv(d),
            0.0,
        );
        let hd = cfg.heads * cfg.head_dim;
        push(format!("layers.{l}.wo"), vec![d, hd], 0.5 * inv(hd), 0.0);
        push(format!("layers.{l}.mlp_norm"), vec![d], 0.1, 1.0);
        if cfg.experts == 0 {
            push(
                format!("layers.{l}.w_gate_up"),
                vec![2 * cfg.ffn, d],
                inv(d),
                0.0,
            );
            push(
                format!("layers.{l}.w_down"),
                vec![d, cfg.ffn],
                0.5 * inv(cfg.ffn),
                0.0,
            );
        } else {
            push(
                format!("layers.{l}.router"),
                vec![cfg.experts, d],
                inv(d),
                0.0,
            );
            for e in 0..cfg.experts {
                push(
                    format!("layers.{l}.experts.{e}.w_gate_up"),
                    vec![2 * cfg.ffn, d],
                    inv(d),
                    0.0,
                );
                push(
                    format!("layers.{l}.experts.{e}.w_down"),
                    vec![d, cfg.ffn],
                    0.5 * inv(cfg.ffn),
                    0.0,
                );
            }
        }
    }
    push("final_norm".into(), vec![d], 0.1, 1.0);
    push("lm_head".into(), vec![cfg.vocab, d], 2.0 * inv(d), 0.0);
    v
}

/// Weights of a model on the host, in f32, by tensor name.
#[derive(Debug, Clone)]
pub struct HostWeights {
    pub cfg: ModelConfig,
    pub tensors: HashMap<String, Vec<f32>>,
}

impl HostWeights {
    /// Seeded deterministic weights (the same values the GPU generates in place).
    pub fn seeded(cfg: &ModelConfig, seed: u64) -> Self {
        let tensors = tensor_specs(cfg)
            .into_iter()
            .map(|s| {
                let key = tensor_key(seed, &s.name);
                let vals = (0..s.numel() as u64)
                    .map(|i| seeded_value(key, i, s.scale, s.offset))
                    .collect();
                (s.name, vals)
            })
            .collect();
        HostWeights {
            cfg: cfg.clone(),
            tensors,
        }
    }

    pub fn get(&self, name: &str) -> Result<&[f32], WeightsError> {
        self.tensors
            .get(name)
            .map(Vec::as_slice)
            .ok_or_else(|| WeightsError::Missing { name: name.into() })
    }

    /// Read a safetensors file. The model configuration comes from the file's `specdec_config`
    /// metadata when present, else `cfg`; every tensor of that configuration must be there with
    /// its exact shape, in bf16, f16 or f32.
    pub fn load(path: &Path, cfg: Option<&ModelConfig>) -> Result<Self, EngineError> {
        let bytes = std::fs::read(path).map_err(|source| WeightsError::Read {
            path: path.into(),
            source,
        })?;
        let not_safetensors = |source| WeightsError::NotSafetensors {
            path: path.into(),
            source,
        };
        let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(not_safetensors)?;
        let st = SafeTensors::deserialize(&bytes).map_err(not_safetensors)?;
        let from_meta = match meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("specdec_config"))
        {
            Some(json) => Some(serde_json::from_str::<ModelConfig>(json).map_err(|source| {
                WeightsError::BadMetadata {
                    path: path.into(),
                    source,
                }
            })?),
            None => None,
        };
        let cfg = match (from_meta, cfg) {
            (Some(c), _) => c,
            (None, Some(c)) => c.clone(),
            (None, None) => return Err(WeightsError::NoMetadata { path: path.into() }.into()),
        };
        cfg.validate()?;
        let mut tensors = HashMap::new();
        for spec in tensor_specs(&cfg) {
            let vals = read_tensor(path, &st, &spec)?;
            tensors.insert(spec.name, vals);
        }
        Ok(HostWeights { cfg, tensors })
    }

    /// Write all tensors as bf16 with the configuration in the metadata.
    pub fn save(&self, path: &Path) -> Result<(), WeightsError> {
        let specs = tensor_specs(&self.cfg);
        let mut buffers: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::with_capacity(specs.len());
        for spec in specs {
            let vals = self.get(&spec.name)?;
            let bytes = vals
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect();
            buffers.push((spec.name, spec.shape, bytes));
        }
        let views = buffers
            .iter()
            .map(|(n, s, b)| {
                safetensors::tensor::TensorView::new(Dtype::BF16, s.clone(), b)
                    .map(|v| (n.clone(), v))
                    .map_err(|source| WeightsError::Build {
                        name: n.clone(),
                        source,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cfg_json = serde_json::to_string(&self.cfg)
            .map_err(|source| WeightsError::EncodeConfig { source })?;
        let meta = HashMap::from([("specdec_config".to_string(), cfg_json)]);
        safetensors::serialize_to_file(views, Some(meta), path).map_err(|source| {
            WeightsError::Write {
                path: path.into(),
                source,
            }
        })
    }
}

/// One tensor of `spec` from the file at `path`, checked (shape, dtype, finite values), as f32.
fn read_tensor(path: &Path, st: &SafeTensors, spec: &TensorSpec) -> Result<Vec<f32>, WeightsError> {
    let t = st
        .tensor(&spec.name)
        .map_err(|_| WeightsError::MissingInFile {
            path: path.into(),
            name: spec.name.clone(),
            shape: spec.shape.clone(),
        })?;
    if t.shape() != spec.shape.as_slice() {
        return Err(WeightsError::Shape {
            path: path.into(),
            name: spec.name.clone(),
            shape: t.shape().to_vec(),
            expected: spec.shape.clone(),
        });
    }
    let data = t.data();
    let vals: Vec<f32> = match t.dtype() {
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        dtype => {
            return Err(WeightsError::Dtype {
                path: path.into(),
                name: spec.name.clone(),
                dtype,
            });
        }
    };
    if vals.iter().any(|v| !v.is_finite()) {
        return Err(WeightsError::NonFinite {
            path: path.into(),
            name: spec.name.clone(),
        });
    }
    Ok(vals)
}
