//! Sparse mixture-of-experts dispatch: each row goes to its top-k experts only.
//!
//! The router logits come back to the host (the pass waits for them), which picks the experts
//! with the CPU reference's [`moe_gates`] and groups the rows by expert ([`Routing`]); each
//! expert then runs its two products on its own rows alone, so an expert chosen by many rows
//! does more work and one chosen by none does nothing. The outputs are added to the residual in
//! each row's top-k order. The host round trip is why MoE passes are never graph-captured.
#![allow(unsafe_code)] // reason: kernel launches and asynchronous copies are FFI.

use std::sync::Arc;

use super::device::{Buf, Dev};
use super::model::GpuModel;
use crate::cpu::moe_gates;
use crate::{EngineError, GpuError};

/// Where each row's expert outputs go: the host half of the dispatch.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Routing {
    /// `[slot -> row (n*k) | row*k + j -> slot (n*k)]`, slots grouped by expert.
    pub(super) route: Vec<u32>,
    /// The gate of each slot.
    pub(super) gate: Vec<f32>,
    /// Rows (slots) per expert, in expert order.
    pub(super) counts: Vec<usize>,
}

/// Route `n` rows by their router logits (`n * experts`, row-major) to their top-`k` experts.
pub(super) fn route_rows(logits: &[f32], n: usize, experts: usize, k: usize) -> Routing {
    let mut per_expert: Vec<Vec<(usize, usize, f32)>> = vec![Vec::new(); experts];
    for r in 0..n {
        let (chosen, gates) = moe_gates(&logits[r * experts..(r + 1) * experts], k);
        for (j, (&x, g)) in chosen.iter().zip(gates).enumerate() {
            per_expert[x as usize].push((r, j, g));
        }
    }
    let mut route = vec![0u32; 2 * n * k];
    let mut gate = vec![0f32; n * k];
    let mut counts = Vec::with_capacity(experts);
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
    Routing {
        route,
        gate,
        counts,
    }
}

impl GpuModel {
    /// The MoE MLP of one layer over `n` rows (router logits already in `self.router`).
    pub(super) fn moe_dispatch(
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
            .map_err(GpuError::driver("reading the router logits"))?;
        dev.stream
            .synchronize()
            .map_err(GpuError::driver("waiting for the router logits"))?;
        let logits: Vec<f32> = raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let routing = route_rows(&logits, n, e, k);
        self.upload_routing(dev, &routing)?;
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
        self.run_experts(dev, experts, &routing.counts)?;
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

    /// Copy the routing table and the gates into their device buffers (asynchronously).
    fn upload_routing(&self, dev: &Dev, routing: &Routing) -> Result<(), GpuError> {
        let route_bytes: Vec<u8> = routing.route.iter().flat_map(|v| v.to_le_bytes()).collect();
        let gate_bytes: Vec<u8> = routing.gate.iter().flat_map(|v| v.to_le_bytes()).collect();
        if route_bytes.len() > self.route.bytes || gate_bytes.len() > self.route_gate.bytes {
            return Err(GpuError::InputTooLarge {
                bytes: route_bytes.len() + gate_bytes.len(),
                capacity: self.route.bytes + self.route_gate.bytes,
            });
        }
        let cu = dev.stream.cu_stream();
        // SAFETY: `route` and `route_gate` are live device allocations at least this large
        // (checked above); the sources are pageable host memory, which the driver stages before
        // the call returns, so they may be dropped afterwards.
        unsafe { cudarc::driver::result::memcpy_htod_async(self.route.ptr, &route_bytes, cu) }
            .map_err(GpuError::driver("copying the MoE routing to the device"))?;
        // SAFETY: as above.
        unsafe { cudarc::driver::result::memcpy_htod_async(self.route_gate.ptr, &gate_bytes, cu) }
            .map_err(GpuError::driver("copying the MoE gates to the device"))?;
        Ok(())
    }

    /// Each expert with at least one row: gate/up product, SwiGLU times the slot's gate, down
    /// product, on its own consecutive slots.
    fn run_experts(
        &self,
        dev: &Dev,
        experts: &[(Arc<Buf>, Arc<Buf>)],
        counts: &[usize],
    ) -> Result<(), GpuError> {
        let c = &self.cfg;
        let d = c.d_model;
        let mut first = 0usize;
        for ((gate_up, down), &cnt) in experts.iter().zip(counts) {
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (row, j) gets exactly one slot, slots are grouped by expert in expert order, each
    /// slot points back at its row, and the gates of a row are its softmax over the chosen.
    #[test]
    fn routing_is_a_consistent_permutation() {
        let (n, e, k) = (5, 4, 2);
        let logits: Vec<f32> = (0..n * e).map(|i| ((i * 7) % 11) as f32 * 0.3).collect();
        let r = route_rows(&logits, n, e, k);
        assert_eq!(r.counts.iter().sum::<usize>(), n * k);
        let mut seen = vec![false; n * k];
        for row in 0..n {
            let (chosen, gates) = moe_gates(&logits[row * e..(row + 1) * e], k);
            for j in 0..k {
                let slot = r.route[n * k + row * k + j] as usize;
                assert!(!seen[slot]);
                seen[slot] = true;
                assert_eq!(r.route[slot] as usize, row);
                assert_eq!(r.gate[slot], gates[j]);
                // The slot lies in its expert's group.
                let x = chosen[j] as usize;
                let start: usize = r.counts[..x].iter().sum();
                assert!((start..start + r.counts[x]).contains(&slot), "{slot}");
            }
        }
    }

    /// An expert no row chooses gets no slots (and so launches nothing).
    #[test]
    fn unchosen_expert_gets_no_rows() {
        // Row 0 picks experts 2 and 1, row 1 experts 0 and 2; expert 3 is always last.
        let logits = [1.0, 2.0, 3.0, -9.0, 3.0, 1.0, 2.0, -9.0];
        let r = route_rows(&logits, 2, 4, 2);
        assert_eq!(r.counts, vec![1, 1, 2, 0]);
    }
}
