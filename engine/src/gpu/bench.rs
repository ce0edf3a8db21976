//! The event-timed microbenchmarks of `--bench`: the prefill's matrix products on the model's
//! own weights, the decode attention of one layer, and whole passes enqueued without a graph.

use serde::Serialize;

use super::backend::GpuBackend;
use super::device::Dev;
use super::forward::Pass;
use crate::config::VerifyAttn;
use crate::{EngineError, Forward, GpuError, Which};

/// Timing of the prefill matrix products (GPU events, median of repetitions).
#[derive(Debug, Clone, Serialize)]
pub struct GemmBench {
    pub rows: usize,
    pub tflops: f64,
    /// TFLOP/s of each product (qkv, o, lm_head, and gate_up, down for a dense MLP).
    pub per_shape: Vec<(String, f64)>,
}

/// Attention kernel timing at the current context.
#[derive(Debug, Clone, Serialize)]
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

/// One benchmarked product of the prefill.
struct GemmShape {
    name: &'static str,
    /// Device addresses of the weight, the input and the output.
    w: u64,
    x: u64,
    y: u64,
    out: usize,
    inp: usize,
    y_f32: bool,
    /// How often the product runs per pass (once per layer, or once).
    count: usize,
}

impl GpuBackend {
    /// The target's prefill products, in the order they are timed.
    fn gemm_shapes(&self) -> Result<Vec<GemmShape>, GpuError> {
        let m = &self.target;
        let c = &m.cfg;
        let lw = m.w.layer(0)?;
        let head = m.w.get("lm_head")?;
        let shape = |name, w: u64, x: u64, y: u64, out, inp, y_f32, count| GemmShape {
            name,
            w,
            x,
            y,
            out,
            inp,
            y_f32,
            count,
        };
        let hd = c.heads * c.head_dim;
        let mut shapes = vec![
            shape(
                "qkv",
                lw.wqkv.ptr,
                m.h.ptr,
                m.qkv.ptr,
                c.qkv_dim(),
                c.d_model,
                false,
                c.layers,
            ),
            shape(
                "o", lw.wo.ptr, m.attn.ptr, m.x.ptr, c.d_model, hd, true, c.layers,
            ),
            shape(
                "lm_head",
                head.ptr,
                m.h.ptr,
                m.logits.ptr,
                c.vocab,
                c.d_model,
                true,
                1,
            ),
        ];
        if let super::weights::MlpW::Dense { gate_up, down } = &lw.mlp {
            let ffn = c.ffn;
            shapes.push(shape(
                "gate_up",
                gate_up.ptr,
                m.h.ptr,
                m.gu.ptr,
                2 * ffn,
                c.d_model,
                false,
                c.layers,
            ));
            shapes.push(shape(
                "down", down.ptr, m.act.ptr, m.x.ptr, c.d_model, ffn, true, c.layers,
            ));
        }
        Ok(shapes)
    }

    /// bf16 matrix-product rate of the target's prefill shapes at `rows` rows (cuBLAS, events).
    pub fn bench_gemm(&mut self, rows: usize, reps: usize) -> Result<GemmBench, EngineError> {
        let rows = rows.min(self.target.nmax);
        let (mut flops, mut secs) = (0.0f64, 0.0f64);
        let mut per = Vec::new();
        for s in self.gemm_shapes()? {
            let dev = &self.dev;
            let t = time_ms(dev, reps, || {
                Ok(dev.gemm(s.w, s.x, s.y, s.out, s.inp, rows, s.y_f32, 0.0)?)
            })?;
            let fl = 2.0 * s.out as f64 * s.inp as f64 * rows as f64;
            per.push((s.name.to_string(), fl / (t * 1e-3) / 1e12));
            flops += fl * s.count as f64;
            secs += t * 1e-3 * s.count as f64;
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
        self.set_inputs(Which::Target, f)?;
        let m = &self.target;
        let dev = &self.dev;
        let ms = time_ms(dev, reps, || {
            Ok(m.attention(dev, 0, f.t, f.off, f.causal, kind)?)
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
        self.set_inputs(which, f)?;
        let m = self.model(which)?;
        let dev = &self.dev;
        let pass = Pass {
            t: f.t,
            off: f.off,
            causal: f.causal,
            k: 1,
            kind: self.kind,
        };
        time_ms(dev, reps, || m.enqueue(dev, pass))
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
    let event = || {
        dev.stream
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(GpuError::driver("recording an event"))
    };
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let a = event()?;
        f()?;
        let b = event()?;
        b.synchronize()
            .map_err(GpuError::driver("waiting for an event"))?;
        v.push(f64::from(
            a.elapsed_ms(&b)
                .map_err(GpuError::driver("reading an event time"))?,
        ));
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}
