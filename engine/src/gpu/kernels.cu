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

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

// Flash-decode attention (split-KV): grid (kv_heads * query groups, splits, batch), 128 threads.
// A block takes keys [split * chunk, +chunk) of one KV head and up to QM queries sharing that KV
// head (the heads of the rows that map to it). The KV heads of one split are neighbouring blocks,
// so together they stream whole cache rows. Eight lanes own one key: each lane holds HD/8 dims
// of K and of V, so a warp works on 4 keys per step; scores are summed over the 8 lanes with 3
// shuffles, and the softmax is online in the exp2 domain (q is pre-scaled by log2 e).
// Loads go through shared memory, not registers: each lane copies its own 16-byte pieces of K
// and V with `cp.async` into a private ring of S stages (one warp step each), S - 1 steps ahead
// of the one it computes, so about (S - 1) * 2 KB per warp are in flight without holding
// registers (a register-prefetch design of the same kernel was latency-bound at 37-41 % of the
// copy bandwidth). A lane reads back only what it copied itself, so no barrier is needed in the
// key loop. The running max is raised only when a score exceeds it by more than 8 (a factor 256
// in exp2), so the accumulators are rescaled rarely instead of at every step. Each warp keeps its
// own max, sum and accumulator; they are merged by shuffles, then through shared memory (the
// ring, reused) in a fixed order, and the block writes an unnormalised partial (max, sum, acc)
// that `attn_combine` merges over the splits.
template <int HD, int QM, int S>
__device__ __forceinline__ void attn_split(const bf16* __restrict__ qkv, const bf16* __restrict__ kc,
                                                 const bf16* __restrict__ vc, const unsigned* base,
                                                 const unsigned* __restrict__ pt, const u64* masks,
                                                 float2* part_ml, float* part_acc, int t, int off,
                                                 int causal, int heads, int kvh, int pps, int ps_shift,
                                                 float scale, int chunk, int nsplit) {
    constexpr int VPL = HD / 64;
    constexpr int DPL = 8 * VPL;
    constexpr int KPW = 4;
    constexpr int NW = 4;
    constexpr int QS = HD + HD / 2;
    constexpr int RING = NW * S * 2 * VPL * 32;   // 16-byte pieces
    static_assert(RING * 16 >= NW * QM * HD * 4, "the merge buffer reuses the ring");
    __shared__ __align__(16) uint4 ring[RING];
    __shared__ __align__(16) float sQ[QM * QS];
    __shared__ float2 sML[NW * QM];
    float* sAcc = reinterpret_cast<float*>(ring);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int grp = lane >> 3, sub = lane & 7;
    const int kh = blockIdx.x % kvh, qg = blockIdx.x / kvh;
    const int split = blockIdx.y, b = blockIdx.z;
    const int G = heads / kvh, Q = t * G, qbase = qg * QM;
    const int nq = min(QM, Q - qbase);
    const int qkv_dim = (heads + 2 * kvh) * HD;
    const long long bs = base[b];
    const long long end = bs + off + t;
    const long long start = (long long)split * chunk;
    const long long stop = min(start + (long long)chunk, end);
    const float qscale = scale * 1.4426950408889634f;

    for (int idx = tid; idx < QM * HD; idx += NW * 32) {
        int i = idx / HD, d = idx % HD;
        float v = 0.f;
        if (i < nq) {
            int qi = qbase + i;
            int row = b * t + qi / G, head = kh * G + qi % G;
            v = bf2f(qkv[(long long)row * qkv_dim + head * HD + d]) * qscale;
        }
        sQ[i * QS + d + (d >> 3) * 4] = v;
    }
    float m[QM], l[QM], acc[QM][DPL];
    #pragma unroll
    for (int i = 0; i < QM; i++) {
        m[i] = -INFINITY; l[i] = 0.f;
        #pragma unroll
        for (int e = 0; e < DPL; e++) acc[i][e] = 0.f;
    }
    __syncthreads();

    const long long psm = (1LL << ps_shift) - 1;
    const unsigned* ptb = pt + (long long)b * pps;
    const long long kvrow = (long long)kvh * HD;
    const bf16* kb0 = kc + (long long)kh * HD + sub * 8;
    const bf16* vb0 = vc + (long long)kh * HD + sub * 8;
    long long span = stop - start - (long long)warp * KPW;
    int nst = span > 0 ? (int)((span + NW * KPW - 1) / (NW * KPW)) : 0;
    uint4* mine = ring + warp * S * 2 * VPL * 32 + lane;
    auto issue = [&](int j) {
        if (j < nst) {
            long long key = start + (long long)(warp + NW * j) * KPW + grp;
            uint4* dst = mine + (j % S) * 2 * VPL * 32;
            const bf16* kp = kb0;
            const bf16* vp = vb0;
            int bytes = 0;
            if (key < stop) {
                long long slot = ((long long)ptb[key >> ps_shift] << ps_shift) | (key & psm);
                kp += slot * kvrow;
                vp += slot * kvrow;
                bytes = 16;
            }
            #pragma unroll
            for (int v = 0; v < VPL; v++) {
                cp_async16(dst + v * 32, kp + v * 64, bytes);
                cp_async16(dst + (VPL + v) * 32, vp + v * 64, bytes);
            }
        }
        cp_async_commit();
    };
    #pragma unroll
    for (int j = 0; j < S - 1; j++) issue(j);
    for (int j = 0; j < nst; j++) {
        issue(j + S - 1);
        cp_async_wait<S - 1>();
        const uint4* src = mine + (j % S) * 2 * VPL * 32;
        long long key = start + (long long)(warp + NW * j) * KPW + grp;
        float kf[DPL];
        #pragma unroll
        for (int v = 0; v < VPL; v++) {
            uint4 w = src[v * 32];
            kf[v * 8 + 0] = bflo(w.x); kf[v * 8 + 1] = bfhi(w.x);
            kf[v * 8 + 2] = bflo(w.y); kf[v * 8 + 3] = bfhi(w.y);
            kf[v * 8 + 4] = bflo(w.z); kf[v * 8 + 5] = bfhi(w.z);
            kf[v * 8 + 6] = bflo(w.w); kf[v * 8 + 7] = bfhi(w.w);
        }
        float p[QM];
        #pragma unroll
        for (int i = 0; i < QM; i++) {
            float a = 0.f;
            #pragma unroll
            for (int v = 0; v < VPL; v++) {
                const float4* qp = reinterpret_cast<const float4*>(sQ + i * QS + v * 96 + sub * 12);
                float4 qa = qp[0], qb = qp[1];
                a += qa.x * kf[v * 8 + 0] + qa.y * kf[v * 8 + 1] + qa.z * kf[v * 8 + 2] + qa.w * kf[v * 8 + 3]
                   + qb.x * kf[v * 8 + 4] + qb.y * kf[v * 8 + 5] + qb.z * kf[v * 8 + 6] + qb.w * kf[v * 8 + 7];
            }
            a += __shfl_xor_sync(0xffffffffu, a, 4);
            a += __shfl_xor_sync(0xffffffffu, a, 2);
            a += __shfl_xor_sync(0xffffffffu, a, 1);
            int qi = min(qbase + i, Q - 1);
            bool ok = key < stop && key_allowed(key, bs, off, qi / G, causal, masks);
            float s = ok ? a : -INFINITY;
            if (s > m[i] + 8.f) {   // lazy rescale: rare once the max has settled
                float corr = exp2f(m[i] - s);   // 0 while m is -inf
                l[i] *= corr;
                #pragma unroll
                for (int e = 0; e < DPL; e++) acc[i][e] *= corr;
                m[i] = s;
            }
            float pi = ok ? exp2f(s - m[i]) : 0.f;
            l[i] += pi;
            p[i] = pi;
        }
        #pragma unroll
        for (int v = 0; v < VPL; v++) {
            uint4 w = src[(VPL + v) * 32];
            float vf[8] = {bflo(w.x), bfhi(w.x), bflo(w.y), bfhi(w.y),
                           bflo(w.z), bfhi(w.z), bflo(w.w), bfhi(w.w)};
            #pragma unroll
            for (int i = 0; i < QM; i++) {
                #pragma unroll
                for (int e = 0; e < 8; e++) acc[i][v * 8 + e] += p[i] * vf[e];
            }
        }
    }
    cp_async_wait<0>();
    #pragma unroll
    for (int o = 8; o < 32; o <<= 1) {
        #pragma unroll
        for (int i = 0; i < QM; i++) {
            float mo = __shfl_xor_sync(0xffffffffu, m[i], o);
            float lo = __shfl_xor_sync(0xffffffffu, l[i], o);
            float mx = fmaxf(m[i], mo);
            bool none = mx == -INFINITY;
            float a = none ? 0.f : exp2f(m[i] - mx);
            float c = none ? 0.f : exp2f(mo - mx);
            l[i] = l[i] * a + lo * c;
            m[i] = mx;
            #pragma unroll
            for (int e = 0; e < DPL; e++) {
                float ao = __shfl_xor_sync(0xffffffffu, acc[i][e], o);
                acc[i][e] = acc[i][e] * a + ao * c;
            }
        }
    }
    __syncthreads();   // every warp is done with the ring before it becomes the merge buffer
    if (grp == 0) {
        #pragma unroll
        for (int i = 0; i < QM; i++) {
            #pragma unroll
            for (int v = 0; v < VPL; v++) {
                float4* dst = reinterpret_cast<float4*>(sAcc + (warp * QM + i) * HD + v * 64 + sub * 8);
                dst[0] = make_float4(acc[i][v * 8 + 0], acc[i][v * 8 + 1], acc[i][v * 8 + 2], acc[i][v * 8 + 3]);
                dst[1] = make_float4(acc[i][v * 8 + 4], acc[i][v * 8 + 5], acc[i][v * 8 + 6], acc[i][v * 8 + 7]);
            }
            if (sub == 0) sML[warp * QM + i] = make_float2(m[i], l[i]);
        }
    }
    __syncthreads();
    for (int idx = tid; idx < nq * HD; idx += NW * 32) {
        int i = idx / HD, d = idx % HD;
        float M = -INFINITY;
        #pragma unroll
        for (int w = 0; w < NW; w++) M = fmaxf(M, sML[w * QM + i].x);
        float L = 0.f, a = 0.f;
        if (M != -INFINITY) {
            #pragma unroll
            for (int w = 0; w < NW; w++) {
                float2 ml = sML[w * QM + i];
                float sc = exp2f(ml.x - M);
                L += ml.y * sc;
                a += sAcc[(w * QM + i) * HD + d] * sc;
            }
        }
        long long pidx = (((long long)b * kvh + kh) * Q + qbase + i) * nsplit + split;
        part_acc[pidx * HD + d] = a;
        if (d == 0) part_ml[pidx] = make_float2(M, L);
    }
}

#define ATTN_SPLIT(HD, QM, S, MINB, NAME) \
extern "C" __global__ void __launch_bounds__(128, MINB) NAME(const bf16* qkv, const bf16* kc, const bf16* vc, \
    const unsigned* base, const unsigned* pt, const u64* masks, float2* part_ml, float* part_acc, int t, int off, \
    int causal, int heads, int kvh, int pps, int ps_shift, float scale, int chunk, int nsplit) { \
    attn_split<HD, QM, S>(qkv, kc, vc, base, pt, masks, part_ml, part_acc, t, off, causal, heads, kvh, pps, \
                                ps_shift, scale, chunk, nsplit); }
// 5 stages (45 KB of shared memory with head-dim 128), at least 3 blocks per SM (2 with 8 queries).
ATTN_SPLIT(64, 1, 5, 3, attn_split_64_1)
ATTN_SPLIT(64, 2, 5, 3, attn_split_64_2)
ATTN_SPLIT(64, 4, 5, 3, attn_split_64_4)
ATTN_SPLIT(64, 5, 5, 3, attn_split_64_5)
ATTN_SPLIT(64, 8, 5, 2, attn_split_64_8)
ATTN_SPLIT(128, 1, 5, 3, attn_split_128_1)
ATTN_SPLIT(128, 2, 5, 3, attn_split_128_2)
ATTN_SPLIT(128, 4, 5, 3, attn_split_128_4)
ATTN_SPLIT(128, 5, 5, 3, attn_split_128_5)
ATTN_SPLIT(128, 8, 5, 2, attn_split_128_8)
// Alternative for the benchmark (`SPECDEC_SPLIT_VARIANT=s3`): 3 stages, 28 KB of shared memory;
// it ran as fast as 5 stages on the H200 (docs/engine.md).
ATTN_SPLIT(128, 5, 3, 3, attn_split_128_5_s3)

#define MAX_SPLITS 4096
// Merge the partial results of every split: one block of 128 threads per (row, head).
extern "C" __global__ void attn_combine(const float2* part_ml, const float* part_acc, bf16* out, int t, int heads,
                                        int kvh, int hd, int nsplit) {
    __shared__ float sw[MAX_SPLITS];
    __shared__ float red[4];
    int rh = blockIdx.x;
    int row = rh / heads, h = rh % heads;
    int b = row / t, i = row % t;
    int G = heads / kvh;
    int kh = h / G, qi = i * G + h % G;
    int Q = t * G;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    long long idx0 = (((long long)b * kvh + kh) * Q + qi) * nsplit;
    float M = -INFINITY;
    for (int s = tid; s < nsplit; s += blockDim.x) {
        float2 ml = part_ml[idx0 + s];
        if (ml.y > 0.f) M = fmaxf(M, ml.x);
    }
    M = warp_max(M);
    if (lane == 0) red[warp] = M;
    __syncthreads();
    M = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    __syncthreads();
    float L = 0.f;
    for (int s = tid; s < nsplit; s += blockDim.x) {
        float2 ml = part_ml[idx0 + s];
        float w = ml.y > 0.f ? exp2f(ml.x - M) : 0.f;
        sw[s] = w;
        L += ml.y * w;
    }
    L = warp_sum(L);
    if (lane == 0) red[warp] = L;
    __syncthreads();
    L = red[0] + red[1] + red[2] + red[3];
    for (int d = tid; d < hd; d += blockDim.x) {
        const float* pa = part_acc + idx0 * hd + d;
        float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
        int s = 0;
        #pragma unroll 2
        for (; s + 4 <= nsplit; s += 4) {
            a0 += sw[s] * pa[(long long)s * hd];
            a1 += sw[s + 1] * pa[(long long)(s + 1) * hd];
            a2 += sw[s + 2] * pa[(long long)(s + 2) * hd];
            a3 += sw[s + 3] * pa[(long long)(s + 3) * hd];
        }
        for (; s < nsplit; s++) a0 += sw[s] * pa[(long long)s * hd];
        float a = (a0 + a1) + (a2 + a3);
        out[(long long)row * heads * hd + h * hd + d] = f2bf(L > 0.f ? a / L : 0.f);
    }
}

// act = silu(gate) * up, optionally times a per-row gate weight (MoE: the slot's gate).
extern "C" __global__ void swiglu(const bf16* gu, bf16* out, const float* gate, int gate_stride, int f, u64 n) {
    for (u64 idx = blockIdx.x * (u64)blockDim.x + threadIdx.x; idx < n * f; idx += (u64)gridDim.x * blockDim.x) {
        u64 r = idx / f, i = idx % f;
        float g = bf2f(gu[r * 2 * f + i]), u = bf2f(gu[r * 2 * f + f + i]);
        float a = g / (1.0f + expf(-g)) * u;
        if (gate) a *= gate[r * gate_stride];
        out[idx] = f2bf(a);
    }
}

// MoE dispatch (sparse): the host groups each row's top-k experts into slots ordered by expert.
// Gather the rows of h that go to the experts into consecutive slots: one block per slot.
extern "C" __global__ void moe_gather(const bf16* h, bf16* hx, const unsigned* slot_row, int d) {
    long long s = blockIdx.x;
    long long r = slot_row[s];
    for (int i = threadIdx.x; i < d; i += blockDim.x) hx[s * d + i] = h[r * d + i];
}

// Add the experts' gated outputs of each row to the residual, in the row's top-k order (the CPU
// reference's order): one block per row.
extern "C" __global__ void moe_scatter(float* x, const float* y, const unsigned* slot_of, int k, int d) {
    long long r = blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float a = 0.f;
        for (int j = 0; j < k; j++) a += y[(long long)slot_of[r * k + j] * d + i];
        x[r * d + i] += a;
    }
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

// Feed one draft level from the pass before it, on the device (`--graphs on`): the last `w` top
// tokens of each sequence's block of `top` are kept in `keep` and, when `feed`, become the next
// pass's tokens, with that level's positions, bases and masks copied from their staged place.
// One block of 256 threads.
extern "C" __global__ void draft_feed(const unsigned* top, int block, int w, int batch, unsigned* keep,
                                      int feed, unsigned* tokens, const unsigned* st_pos, unsigned* pos,
                                      const unsigned* st_base, unsigned* base,
                                      const unsigned long long* st_masks, unsigned long long* masks) {
    for (int i = threadIdx.x; i < batch * w; i += blockDim.x) {
        int b = i / w, j = i % w;
        unsigned t = top[(long long)b * block + block - w + j];
        keep[i] = t;
        if (feed) { tokens[i] = t; pos[i] = st_pos[i]; }
    }
    if (feed) {
        for (int b = threadIdx.x; b < batch; b += blockDim.x) base[b] = st_base[b];
        for (int j = threadIdx.x; j < w; j += blockDim.x) masks[j] = st_masks[j];
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
