// specdec GPU kernels, compiled at run time by NVRTC for the device's architecture.
// bf16 values are carried as raw 16-bit patterns (no cuda_bf16.h: NVRTC needs no include path).
// Every kernel reads its per-call inputs (tokens, positions, base lengths, masks) from device
// memory, so the decode step can be captured in a CUDA graph and replayed with new inputs.

#define INFINITY __int_as_float(0x7f800000)
typedef unsigned short bf16;
typedef unsigned long long u64;

__device__ __forceinline__ float bf2f(bf16 v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ float bflo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bfhi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ bf16 f2bf(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
}

__device__ __forceinline__ u64 mix64(u64 x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}
__device__ __forceinline__ float uniform(u64 key, u64 idx) {
    u64 h = mix64(key ^ idx);
    float t = (float)(h >> 40) * (1.0f / 16777216.0f);
    return t * 2.0f - 1.0f;
}

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ long long kv_slot(const unsigned* pt, int b, int pps, int ps, long long logical) {
    long long page = pt[(long long)b * pps + logical / ps];
    return page * ps + logical % ps;
}

extern "C" __global__ void init_uniform(bf16* out, u64 n, u64 key, float scale, float offset) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        out[i] = f2bf(__fadd_rn(__fmul_rn(uniform(key, i), scale), offset));
    }
}

extern "C" __global__ void fill_background(bf16* kc, bf16* vc, const unsigned* pt, int pps, int ps,
                                           int batch, int context, int kvh, int hd, u64 kkey, u64 vkey) {
    u64 total = (u64)batch * context * kvh * hd;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        int d = (int)(i % hd);
        u64 r = i / hd;
        int h = (int)(r % kvh); r /= kvh;
        long long pos = (long long)(r % context);
        int b = (int)(r / context);
        u64 idx = ((u64)b << 40) | (u64)((pos * kvh + h) * hd + d);
        long long dst = (kv_slot(pt, b, pps, ps, pos) * kvh + h) * hd + d;
        kc[dst] = f2bf(uniform(kkey, idx));
        vc[dst] = f2bf(uniform(vkey, idx));
    }
}

extern "C" __global__ void embed(const unsigned* tokens, const bf16* emb, float* x, int d) {
    long long row = blockIdx.x;
    long long tok = tokens[row];
    for (int i = threadIdx.x; i < d; i += blockDim.x) x[row * d + i] = bf2f(emb[tok * d + i]);
}

// One block (256 threads) per row: out = x / rms(x) * w.
extern "C" __global__ void rmsnorm(const float* x, const bf16* w, bf16* out, int d, float eps) {
    __shared__ float red[8];
    long long row = blockIdx.x;
    const float* xr = x + row * d;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.f;
        v = warp_sum(v);
        if (threadIdx.x == 0) red[0] = v;
    }
    __syncthreads();
    float r = 1.0f / sqrtf(red[0] / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) out[row * d + i] = f2bf(xr[i] * r * bf2f(w[i]));
}

// RoPE on q and k of every row (in place), then k and v into the paged cache of this layer.
extern "C" __global__ void rope_cache(bf16* qkv, const unsigned* pos, const unsigned* base, const unsigned* pt,
                                      bf16* kc, bf16* vc, int t, int off, int heads, int kvh, int hd,
                                      int pps, int ps, float theta) {
    int row = blockIdx.x;
    int b = row / t, i = row % t;
    int qkv_dim = (heads + 2 * kvh) * hd;
    bf16* r = qkv + (long long)row * qkv_dim;
    long long slot = kv_slot(pt, b, pps, ps, (long long)base[b] + off + i);
    float p = (float)pos[row];
    int half = hd / 2;
    for (int idx = threadIdx.x; idx < (heads + kvh) * half; idx += blockDim.x) {
        int hh = idx / half, j = idx % half;
        float freq = powf(theta, (-2.0f * (float)j) / (float)hd);
        float s, c;
        sincosf(p * freq, &s, &c);
        float a = bf2f(r[hh * hd + j]), bb = bf2f(r[hh * hd + j + half]);
        float x0 = a * c - bb * s, x1 = a * s + bb * c;
        if (hh < heads) {
            r[hh * hd + j] = f2bf(x0);
            r[hh * hd + j + half] = f2bf(x1);
        } else {
            long long at = (slot * kvh + (hh - heads)) * hd;
            kc[at + j] = f2bf(x0);
            kc[at + j + half] = f2bf(x1);
        }
    }
    for (int idx = threadIdx.x; idx < kvh * hd; idx += blockDim.x) {
        vc[slot * kvh * hd + idx] = r[(heads + kvh) * hd + idx];
    }
}

__device__ __forceinline__ bool key_allowed(long long j, long long base, int off, int i, int causal,
                                            const u64* masks) {
    if (j < base) return true;
    int s = (int)(j - base);
    if (causal) return s <= off + i;
    return (masks[i] >> s) & 1ULL;
}

// Gather-heavy attention: one warp per (row, head), one key at a time, a page-table lookup and
// scalar loads per key. Used for prefill and for `--verify-attn scattered`.
template <int HD>
__device__ void attn_warp(const bf16* qkv, const bf16* kc, const bf16* vc, const unsigned* base,
                          const unsigned* pt, const u64* masks, bf16* out, int rows, int t, int off,
                          int causal, int heads, int kvh, int pps, int ps, float scale) {
    constexpr int DPL = HD / 32;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows * heads) return;
    int row = warp / heads, h = warp % heads;
    int b = row / t, i = row % t;
    int kh = h / (heads / kvh);
    int qkv_dim = (heads + 2 * kvh) * HD;
    float q[DPL], acc[DPL];
    #pragma unroll
    for (int j = 0; j < DPL; j++) {
        q[j] = bf2f(qkv[(long long)row * qkv_dim + h * HD + lane * DPL + j]) * scale;
        acc[j] = 0.f;
    }
    long long bs = base[b];
    long long end = bs + off + t;
    float m = -INFINITY, l = 0.f;
    for (long long j = 0; j < end; j++) {
        if (!key_allowed(j, bs, off, i, causal, masks)) continue;
        long long at = (kv_slot(pt, b, pps, ps, j) * kvh + kh) * HD + lane * DPL;
        float s = 0.f;
        #pragma unroll
        for (int e = 0; e < DPL; e++) s += q[e] * bf2f(kc[at + e]);
        s = warp_sum(s);
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
        #pragma unroll
        for (int e = 0; e < DPL; e++) acc[e] = acc[e] * corr + p * bf2f(vc[at + e]);
        m = mn;
    }
    float inv = l > 0.f ? 1.0f / l : 0.f;
    #pragma unroll
    for (int e = 0; e < DPL; e++) out[(long long)row * heads * HD + h * HD + lane * DPL + e] = f2bf(acc[e] * inv);
}

#define ATTN_WARP(HD) \
extern "C" __global__ void attn_warp_##HD(const bf16* qkv, const bf16* kc, const bf16* vc, const unsigned* base, \
    const unsigned* pt, const u64* masks, bf16* out, int rows, int t, int off, int causal, int heads, int kvh, \
    int pps, int ps, float scale) { \
    attn_warp<HD>(qkv, kc, vc, base, pt, masks, out, rows, t, off, causal, heads, kvh, pps, ps, scale); }
ATTN_WARP(64)
ATTN_WARP(128)

// Flash-decode attention: grid (splits, kv_heads * query groups, batch), 128 threads. Each block
// takes `chunk` keys of one KV head and up to 4*QPW queries (the rows' heads that share that KV
// head), streams the keys through shared memory in tiles of 32 with 16-byte loads prefetched one
// tile ahead, and writes an unnormalised partial result that `attn_combine` merges.
template <int HD, int QPW>
__device__ void attn_split(const bf16* qkv, const bf16* kc, const bf16* vc, const unsigned* base,
                           const unsigned* pt, const u64* masks, float2* part_ml, float* part_acc,
                           int t, int off, int causal, int heads, int kvh, int pps, int ps, float scale,
                           int chunk, int nsplit, int qgroups) {
    constexpr int QB = 4 * QPW;        // queries per block
    constexpr int DPL = HD / 32;        // dims per lane in the PV product
    constexpr int KS = HD + 2;          // padded K row (bf16 elements): conflict-free row reads
    constexpr int NL = HD / 32;         // 16-byte loads per thread per tile, for K and for V
    __shared__ float sQ[QB][HD];
    __shared__ __align__(16) bf16 sK[32 * KS];
    __shared__ __align__(16) bf16 sV[32 * HD];

    int split = blockIdx.x;
    int kh = blockIdx.y / qgroups, qg = blockIdx.y % qgroups;
    int b = blockIdx.z;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int G = heads / kvh;
    int Q = t * G;
    int qbase = qg * QB;
    int qkv_dim = (heads + 2 * kvh) * HD;
    long long bs = base[b];
    long long end = bs + off + t;
    long long start = (long long)split * chunk;
    long long stop = min(start + chunk, end);

    float m[QPW], l[QPW], acc[QPW][DPL];
    #pragma unroll
    for (int i = 0; i < QPW; i++) {
        m[i] = -INFINITY; l[i] = 0.f;
        #pragma unroll
        for (int e = 0; e < DPL; e++) acc[i][e] = 0.f;
    }

    if (start < stop) {
        for (int idx = tid; idx < QB * HD; idx += 128) {
            int ql = idx / HD, d = idx % HD;
            int qi = qbase + ql;
            float v = 0.f;
            if (qi < Q) {
                int row = b * t + qi / G;
                int head = kh * G + qi % G;
                v = bf2f(qkv[(long long)row * qkv_dim + head * HD + d]) * scale;
            }
            sQ[ql][d] = v;
        }
        uint4 kr[NL], vr[NL];
        auto load = [&](long long tile) {
            #pragma unroll
            for (int n = 0; n < NL; n++) {
                int c = tid + n * 128;
                int r = c / (HD / 8), c8 = c % (HD / 8);
                long long key = tile + r;
                if (key < stop) {
                    long long at = (kv_slot(pt, b, pps, ps, key) * kvh + kh) * HD + c8 * 8;
                    kr[n] = *reinterpret_cast<const uint4*>(kc + at);
                    vr[n] = *reinterpret_cast<const uint4*>(vc + at);
                } else {
                    kr[n] = make_uint4(0, 0, 0, 0);
                    vr[n] = make_uint4(0, 0, 0, 0);
                }
            }
        };
        load(start);
        for (long long tile = start; tile < stop; tile += 32) {
            __syncthreads();
            #pragma unroll
            for (int n = 0; n < NL; n++) {
                int c = tid + n * 128;
                int r = c / (HD / 8), c8 = c % (HD / 8);
                unsigned* kd = reinterpret_cast<unsigned*>(sK + r * KS + c8 * 8);
                kd[0] = kr[n].x; kd[1] = kr[n].y; kd[2] = kr[n].z; kd[3] = kr[n].w;
                *reinterpret_cast<uint4*>(sV + r * HD + c8 * 8) = vr[n];
            }
            __syncthreads();
            if (tile + 32 < stop) load(tile + 32);

            long long key = tile + lane;
            const unsigned* krow = reinterpret_cast<const unsigned*>(sK + lane * KS);
            // Scores: lane = key of the tile; each K word is converted once for all queries.
            float p[QPW];
            #pragma unroll
            for (int i = 0; i < QPW; i++) p[i] = 0.f;
            #pragma unroll 8
            for (int w2 = 0; w2 < HD / 2; w2++) {
                unsigned kw = krow[w2];
                float k0 = bflo(kw), k1 = bfhi(kw);
                #pragma unroll
                for (int i = 0; i < QPW; i++) {
                    float2 qv = reinterpret_cast<const float2*>(sQ[warp + 4 * i])[w2];
                    p[i] += qv.x * k0 + qv.y * k1;
                }
            }
            #pragma unroll
            for (int i = 0; i < QPW; i++) {
                int qi = qbase + warp + 4 * i;
                if (qi < Q) {
                    bool ok = key < stop && key_allowed(key, bs, off, qi / G, causal, masks);
                    float s = ok ? p[i] : -INFINITY;
                    float mn = fmaxf(m[i], warp_max(s));
                    float corr = mn == -INFINITY ? 1.f : expf(m[i] - mn);
                    float pi = mn == -INFINITY ? 0.f : expf(s - mn);
                    l[i] = l[i] * corr + warp_sum(pi);
                    #pragma unroll
                    for (int e = 0; e < DPL; e++) acc[i][e] *= corr;
                    m[i] = mn;
                    p[i] = pi;
                } else {
                    p[i] = 0.f;
                }
            }
            #pragma unroll 4
            for (int k = 0; k < 32; k++) {
                float v[DPL];
                if (DPL == 4) {
                    uint2 w = *reinterpret_cast<const uint2*>(sV + k * HD + lane * 4);
                    v[0] = bflo(w.x); v[1] = bfhi(w.x); v[2] = bflo(w.y); v[3] = bfhi(w.y);
                } else {
                    unsigned w = *reinterpret_cast<const unsigned*>(sV + k * HD + lane * 2);
                    v[0] = bflo(w); v[1] = bfhi(w);
                }
                #pragma unroll
                for (int i = 0; i < QPW; i++) {
                    float pk = __shfl_sync(0xffffffffu, p[i], k);
                    #pragma unroll
                    for (int e = 0; e < DPL; e++) acc[i][e] += pk * v[e];
                }
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < QPW; i++) {
        int qi = qbase + warp + 4 * i;
        if (qi < Q) {
            long long idx = (((long long)b * kvh + kh) * Q + qi) * nsplit + split;
            if (lane == 0) part_ml[idx] = make_float2(m[i], l[i]);
            #pragma unroll
            for (int e = 0; e < DPL; e++) part_acc[idx * HD + lane * DPL + e] = acc[i][e];
        }
    }
}

#define ATTN_SPLIT(HD, QPW) \
extern "C" __global__ void __launch_bounds__(128) attn_split_##HD##_##QPW(const bf16* qkv, const bf16* kc, \
    const bf16* vc, const unsigned* base, const unsigned* pt, const u64* masks, float2* part_ml, float* part_acc, \
    int t, int off, int causal, int heads, int kvh, int pps, int ps, float scale, int chunk, int nsplit, \
    int qgroups) { \
    attn_split<HD, QPW>(qkv, kc, vc, base, pt, masks, part_ml, part_acc, t, off, causal, heads, kvh, pps, ps, \
                        scale, chunk, nsplit, qgroups); }
ATTN_SPLIT(64, 1)
ATTN_SPLIT(64, 2)
ATTN_SPLIT(64, 4)
ATTN_SPLIT(64, 8)
ATTN_SPLIT(128, 1)
ATTN_SPLIT(128, 2)
ATTN_SPLIT(128, 4)
ATTN_SPLIT(128, 8)

// Merge the partial results of every split: one block of HD threads per (row, head).
extern "C" __global__ void attn_combine(const float2* part_ml, const float* part_acc, bf16* out, int t, int heads,
                                        int kvh, int hd, int nsplit) {
    int rh = blockIdx.x;
    int row = rh / heads, h = rh % heads;
    int b = row / t, i = row % t;
    int G = heads / kvh;
    int kh = h / G, qi = i * G + h % G;
    int Q = t * G;
    long long idx0 = (((long long)b * kvh + kh) * Q + qi) * nsplit;
    float M = -INFINITY;
    for (int s = 0; s < nsplit; s++) {
        float2 ml = part_ml[idx0 + s];
        if (ml.y > 0.f) M = fmaxf(M, ml.x);
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float L = 0.f, a = 0.f;
        for (int s = 0; s < nsplit; s++) {
            float2 ml = part_ml[idx0 + s];
            if (ml.y > 0.f) {
                float w = expf(ml.x - M);
                L += ml.y * w;
                a += part_acc[(idx0 + s) * hd + d] * w;
            }
        }
        out[(long long)row * heads * hd + h * hd + d] = f2bf(L > 0.f ? a / L : 0.f);
    }
}

// act = silu(gate) * up, optionally times a per-row gate weight (MoE).
extern "C" __global__ void swiglu(const bf16* gu, bf16* out, const float* gate, int gate_stride, int f, u64 n) {
    for (u64 idx = blockIdx.x * (u64)blockDim.x + threadIdx.x; idx < n * f; idx += (u64)gridDim.x * blockDim.x) {
        u64 r = idx / f, i = idx % f;
        float g = bf2f(gu[r * 2 * f + i]), u = bf2f(gu[r * 2 * f + f + i]);
        float a = g / (1.0f + expf(-g)) * u;
        if (gate) a *= gate[r * gate_stride];
        out[idx] = f2bf(a);
    }
}

// MoE routing: top-k experts per row (ties to the lower index), softmax over the chosen logits;
// gates[r][e] is 0 for experts not chosen.
extern "C" __global__ void moe_gate(const float* logits, float* gates, int n, int E, int k) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const float* lr = logits + (long long)r * E;
    float* gr = gates + (long long)r * E;
    unsigned long long chosen = 0ULL;
    float mx = -INFINITY;
    for (int it = 0; it < k; it++) {
        int best = -1; float bv = -INFINITY;
        for (int e = 0; e < E; e++) {
            if ((chosen >> e) & 1ULL) continue;
            float v = lr[e] != lr[e] ? -INFINITY : lr[e];
            if (best < 0 || v > bv) { best = e; bv = v; }
        }
        chosen |= 1ULL << best;
        if (it == 0) mx = bv;
    }
    float s = 0.f;
    for (int e = 0; e < E; e++) if ((chosen >> e) & 1ULL) s += expf(lr[e] - mx);
    for (int e = 0; e < E; e++) gr[e] = ((chosen >> e) & 1ULL) ? expf(lr[e] - mx) / s : 0.f;
}

// Top-k token ids of each row of f32 logits (ties to the lower index, NaN lowest): 256 threads.
extern "C" __global__ void topk(const float* logits, unsigned* out, int V, int k) {
    __shared__ float bv[256];
    __shared__ int bi[256];
    __shared__ int chosen[8];
    long long row = blockIdx.x;
    const float* lr = logits + row * V;
    for (int it = 0; it < k; it++) {
        float best = -INFINITY; int besti = 0x7fffffff;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            bool skip = false;
            for (int c = 0; c < it; c++) skip |= chosen[c] == i;
            if (skip) continue;
            float v = lr[i] != lr[i] ? -INFINITY : lr[i];
            if (besti == 0x7fffffff || v > best) { best = v; besti = i; }
        }
        bv[threadIdx.x] = best; bi[threadIdx.x] = besti;
        __syncthreads();
        for (int s = 128; s > 0; s >>= 1) {
            if (threadIdx.x < s) {
                float ov = bv[threadIdx.x + s]; int oi = bi[threadIdx.x + s];
                bool take = oi != 0x7fffffff && (bi[threadIdx.x] == 0x7fffffff || ov > bv[threadIdx.x] ||
                            (ov == bv[threadIdx.x] && oi < bi[threadIdx.x]));
                if (take) { bv[threadIdx.x] = ov; bi[threadIdx.x] = oi; }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) { chosen[it] = bi[0]; out[row * k + it] = (unsigned)bi[0]; }
        __syncthreads();
    }
}

// Move the K/V of accepted tree nodes into consecutive slots: grid (layers, batch), 128 threads.
// paths[b][j] >= j, so copying in increasing j never overwrites a source still to be read.
extern "C" __global__ void kv_commit(bf16* kc, bf16* vc, const unsigned* base, const unsigned* pt,
                                     const unsigned* paths, const unsigned* counts, long long layer_stride,
                                     int kvh, int hd, int pps, int ps) {
    int layer = blockIdx.x, b = blockIdx.y;
    bf16* k = kc + layer * layer_stride;
    bf16* v = vc + layer * layer_stride;
    long long bs = base[b];
    int row = kvh * hd;
    for (unsigned j = 0; j < counts[b]; j++) {
        unsigned src = paths[b * 64 + j];
        if (src != j) {
            long long s = kv_slot(pt, b, pps, ps, bs + src) * row;
            long long d = kv_slot(pt, b, pps, ps, bs + j) * row;
            for (int e = threadIdx.x; e < row; e += blockDim.x) { k[d + e] = k[s + e]; v[d + e] = v[s + e]; }
        }
        __syncthreads();
    }
}
