//! The model's tensors on the device: generated in place from the seed (the same values as
//! [`HostWeights::seeded`]) or uploaded from host weights, and looked up by name per layer.
#![allow(unsafe_code)] // reason: the in-place initialisation kernel launch is FFI.

use std::collections::HashMap;
use std::sync::Arc;

use super::device::{Buf, Dev};
use crate::config::ModelConfig;
use crate::weights::{HostWeights, tensor_key, tensor_specs};
use crate::{EngineError, GpuError};

/// Weights on the device, shared by reference (self-speculation reuses the target's).
#[derive(Clone)]
pub struct GpuWeights {
    pub(super) cfg: ModelConfig,
    t: Arc<HashMap<String, Arc<Buf>>>,
}

/// The MLP weights of one layer.
pub(super) enum MlpW {
    Dense {
        gate_up: Arc<Buf>,
        down: Arc<Buf>,
    },
    Moe {
        router: Arc<Buf>,
        /// `(gate_up, down)` of each expert.
        experts: Vec<(Arc<Buf>, Arc<Buf>)>,
    },
}

/// The weights of one layer.
pub(super) struct LayerW {
    pub(super) attn_norm: Arc<Buf>,
    pub(super) wqkv: Arc<Buf>,
    pub(super) wo: Arc<Buf>,
    pub(super) mlp_norm: Arc<Buf>,
    pub(super) mlp: MlpW,
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
                .map_err(GpuError::driver("uploading weights"))?;
            t.insert(s.name, Arc::new(buf));
        }
        Ok(GpuWeights {
            cfg: w.cfg.clone(),
            t: Arc::new(t),
        })
    }

    pub(super) fn get(&self, n: &str) -> Result<Arc<Buf>, GpuError> {
        self.t
            .get(n)
            .cloned()
            .ok_or_else(|| GpuError::MissingTensor { name: n.into() })
    }

    /// The weights of layer `l` (an MoE layer when the configuration has experts).
    pub(super) fn layer(&self, l: usize) -> Result<LayerW, GpuError> {
        let g = |s: &str| self.get(&format!("layers.{l}.{s}"));
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
