// Causal self-attention with grouped-query heads, flash-style: no T × T
// matrix is kept. qkv is (b, t, W) laid out [q (nh heads) | k (nkv heads) |
// v (nkv heads)] with W = c + 2·nkv·hs; query head h reads key/value head
// h / (nh / nkv). The forward runs an online softmax over tiles of keys and
// saves one logsumexp per (b, h, t) row; the backward recomputes each
// probability from it.
//
// Tiles of rows pass through dynamic shared memory as [rows][hq + 1]
// (hq: the head size rounded up to 4, zeros past hs; the +1 against bank
// conflicts). Products of tiles are register-blocked: each thread sums a
// 4 × 4 block of outputs, reading 4 + 4 values from shared memory for 16
// multiply-adds. The launcher picks the tile sizes (multiples of 4) so a
// kernel's tiles fit in 48 KiB (compute/cuda/attention.rs). Every sum runs in
// a fixed order (channels, then keys or queries in ascending order), so
// results are deterministic; each output has one owner, so no atomics.

#define ATT_THREADS 64
#define ATT_NEG_INF __int_as_float(0xff800000)

// dst[r][d] (row stride hq + 1) = rows[(row0 + r) · stride + d]; 0 past
// t_len and past hs.
__device__ void att_rows(float* dst, const float* rows, size_t stride, size_t row0, size_t t_len, unsigned n,
                         unsigned hs, unsigned hq) {
    for (unsigned i = threadIdx.x; i < n * hq; i += ATT_THREADS) {
        unsigned r = i / hq, d = i % hq;
        size_t t = row0 + r;
        dst[r * (hq + 1) + d] = t < t_len && d < hs ? rows[t * stride + d] : 0.0f;
    }
}

// acc[a][b] += Σ_k x[a·sx + k] · y[b·sy + k], k ascending (rows of x by rows of y).
__device__ void att_rows_by_rows(float acc[4][4], const float* x, unsigned sx, const float* y, unsigned sy,
                                 unsigned n) {
    for (unsigned k = 0; k < n; k++) {
        float xa[4], yb[4];
        for (unsigned a = 0; a < 4; a++) xa[a] = x[a * sx + k];
        for (unsigned b = 0; b < 4; b++) yb[b] = y[b * sy + k];
        for (unsigned a = 0; a < 4; a++)
            for (unsigned b = 0; b < 4; b++) acc[a][b] += xa[a] * yb[b];
    }
}

// acc[a][b] += Σ_k x[a·sx + k] · y[k·sy + b], k ascending (rows of x by columns of y).
__device__ void att_rows_by_cols(float acc[4][4], const float* x, unsigned sx, const float* y, unsigned sy,
                                 unsigned n) {
    for (unsigned k = 0; k < n; k++) {
        float xa[4], yb[4];
        for (unsigned a = 0; a < 4; a++) xa[a] = x[a * sx + k];
        for (unsigned b = 0; b < 4; b++) yb[b] = y[k * sy + b];
        for (unsigned a = 0; a < 4; a++)
            for (unsigned b = 0; b < 4; b++) acc[a][b] += xa[a] * yb[b];
    }
}

// acc[a][b] += Σ_k x[k·sx + a] · y[k·sy + b], k ascending (columns of x by columns of y).
__device__ void att_cols_by_cols(float acc[4][4], const float* x, unsigned sx, const float* y, unsigned sy,
                                 unsigned n) {
    for (unsigned k = 0; k < n; k++) {
        float xa[4], yb[4];
        for (unsigned a = 0; a < 4; a++) xa[a] = x[k * sx + a];
        for (unsigned b = 0; b < 4; b++) yb[b] = y[k * sy + b];
        for (unsigned a = 0; a < 4; a++)
            for (unsigned b = 0; b < 4; b++) acc[a][b] += xa[a] * yb[b];
    }
}

// The 4 × 4 block at (r0, c0) of a [.][s] tile: load (scaled per row) or store.
__device__ void att_block_load(float acc[4][4], const float* t, unsigned s, unsigned r0, unsigned c0,
                               const float* row_scale) {
    for (unsigned a = 0; a < 4; a++)
        for (unsigned b = 0; b < 4; b++)
            acc[a][b] = t[(r0 + a) * s + c0 + b] * (row_scale ? row_scale[r0 + a] : 1.0f);
}
__device__ void att_block_store(float acc[4][4], float* t, unsigned s, unsigned r0, unsigned c0) {
    for (unsigned a = 0; a < 4; a++)
        for (unsigned b = 0; b < 4; b++) t[(r0 + a) * s + c0 + b] = acc[a][b];
}

// out (b, t, c), lse (b, nh, t). Grid (b·nh, query tiles of tq); a block
// owns tq query rows of one head and walks the key tiles of tk (tk = tq)
// up to its diagonal.
extern "C" __global__ void flash_forward(float* out, float* lse, const float* qkv, unsigned t_len, unsigned c,
                                         unsigned nh, unsigned nkv, float scale, unsigned tq, unsigned tk) {
    extern __shared__ float att_smem[];
    size_t T = t_len;
    unsigned hs = c / nh, hq = (hs + 3) / 4 * 4, hp = hq + 1, sp = tk + 1;
    size_t w = (size_t)c + 2 * (size_t)nkv * hs;
    size_t bh = blockIdx.x, bi = bh / nh, h = bh % nh, g = h / (nh / nkv);
    size_t t0 = (size_t)blockIdx.y * tq;
    float* q = att_smem;
    float* k = q + tq * hp;
    float* v = k + tk * hp;
    float* o = v + tk * hp;
    float* s = o + tq * hp;
    float* m = s + tq * sp;
    float* l = m + tq;
    float* alpha = l + tq;
    const float* rows = qkv + bi * T * w;
    att_rows(q, rows + h * hs, w, t0, T, tq, hs, hq);
    for (unsigned i = threadIdx.x; i < tq * hp; i += ATT_THREADS) o[i] = 0.0f;
    for (unsigned r = threadIdx.x; r < tq; r += ATT_THREADS) {
        m[r] = ATT_NEG_INF;
        l[r] = 0.0f;
    }
    for (size_t u0 = 0; u0 < t0 + tq && u0 < T; u0 += tk) {
        att_rows(k, rows + c + g * hs, w, u0, T, tk, hs, hq);
        att_rows(v, rows + c + (nkv + g) * hs, w, u0, T, tk, hs, hq);
        __syncthreads();
        for (unsigned i = threadIdx.x; i < (tq / 4) * (tk / 4); i += ATT_THREADS) {
            unsigned r0 = i / (tk / 4) * 4, j0 = i % (tk / 4) * 4;
            float acc[4][4] = {};
            att_rows_by_rows(acc, q + r0 * hp, hp, k + j0 * hp, hp, hq);
            for (unsigned a = 0; a < 4; a++)
                for (unsigned b = 0; b < 4; b++)
                    s[(r0 + a) * sp + j0 + b] = u0 + j0 + b > t0 + r0 + a ? ATT_NEG_INF : acc[a][b] * scale;
        }
        __syncthreads();
        // Key 0 is in the first tile and comes before every row, so m is
        // finite from the first tile on; a later tile wholly past a row's
        // diagonal gives it p = 0 and alpha = 1.
        for (unsigned r = threadIdx.x; r < tq; r += ATT_THREADS) {
            float mx = m[r];
            for (unsigned j = 0; j < tk; j++) mx = fmaxf(mx, s[r * sp + j]);
            float sum = 0.0f;
            for (unsigned j = 0; j < tk; j++) {
                float p = expf(s[r * sp + j] - mx);
                s[r * sp + j] = p;
                sum += p;
            }
            alpha[r] = expf(m[r] - mx);
            l[r] = l[r] * alpha[r] + sum;
            m[r] = mx;
        }
        __syncthreads();
        for (unsigned i = threadIdx.x; i < (tq / 4) * (hq / 4); i += ATT_THREADS) {
            unsigned r0 = i / (hq / 4) * 4, d0 = i % (hq / 4) * 4;
            float acc[4][4];
            att_block_load(acc, o, hp, r0, d0, alpha);
            att_rows_by_cols(acc, s + r0 * sp, sp, v + d0, hp, tk);
            att_block_store(acc, o, hp, r0, d0);
        }
        __syncthreads();
    }
    for (unsigned i = threadIdx.x; i < tq * hs; i += ATT_THREADS) {
        unsigned r = i / hs, d = i % hs;
        size_t t = t0 + r;
        if (t < T) out[(bi * T + t) * c + h * hs + d] = o[r * hp + d] / l[r];
    }
    for (unsigned r = threadIdx.x; r < tq; r += ATT_THREADS) {
        size_t t = t0 + r;
        if (t < T) lse[bh * T + t] = m[r] + logf(l[r]);
    }
}

// dq (+= into dqkv) and each row's D = Σ_t2 p·(dout·v) (into dsum (b, nh, t),
// for flash_backward_kv). Grid (b·nh, query tiles of tq); two passes over
// the key tiles of tk (tk = tq) up to the diagonal: the first sums D, the
// second dq.
extern "C" __global__ void flash_backward_q(float* dqkv, float* dsum, const float* dout, const float* qkv,
                                            const float* lse, unsigned t_len, unsigned c, unsigned nh,
                                            unsigned nkv, float scale, unsigned tq, unsigned tk) {
    extern __shared__ float att_smem[];
    size_t T = t_len;
    unsigned hs = c / nh, hq = (hs + 3) / 4 * 4, hp = hq + 1, sp = tk + 1;
    size_t w = (size_t)c + 2 * (size_t)nkv * hs;
    size_t bh = blockIdx.x, bi = bh / nh, h = bh % nh, g = h / (nh / nkv);
    size_t t0 = (size_t)blockIdx.y * tq;
    float* q = att_smem;
    float* dO = q + tq * hp;
    float* dq = dO + tq * hp;
    float* k = dq + tq * hp;
    float* v = k + tk * hp;
    float* p = v + tk * hp;
    float* ls = p + tq * sp;
    float* dd = ls + tq;
    const float* rows = qkv + bi * T * w;
    att_rows(q, rows + h * hs, w, t0, T, tq, hs, hq);
    att_rows(dO, dout + bi * T * c + h * hs, c, t0, T, tq, hs, hq);
    for (unsigned i = threadIdx.x; i < tq * hp; i += ATT_THREADS) dq[i] = 0.0f;
    for (unsigned r = threadIdx.x; r < tq; r += ATT_THREADS) {
        ls[r] = t0 + r < T ? lse[bh * T + t0 + r] : 0.0f;
        dd[r] = 0.0f;
    }
    for (unsigned pass = 0; pass < 2; pass++) {
        for (size_t u0 = 0; u0 < t0 + tq && u0 < T; u0 += tk) {
            att_rows(k, rows + c + g * hs, w, u0, T, tk, hs, hq);
            att_rows(v, rows + c + (nkv + g) * hs, w, u0, T, tk, hs, hq);
            __syncthreads();
            for (unsigned i = threadIdx.x; i < (tq / 4) * (tk / 4); i += ATT_THREADS) {
                unsigned r0 = i / (tk / 4) * 4, j0 = i % (tk / 4) * 4;
                float sc[4][4] = {}, dp[4][4] = {};
                att_rows_by_rows(sc, q + r0 * hp, hp, k + j0 * hp, hp, hq);
                att_rows_by_rows(dp, dO + r0 * hp, hp, v + j0 * hp, hp, hq);
                for (unsigned a = 0; a < 4; a++)
                    for (unsigned b = 0; b < 4; b++) {
                        unsigned r = r0 + a;
                        float pr = u0 + j0 + b > t0 + r ? 0.0f : expf(sc[a][b] * scale - ls[r]);
                        // First pass: p·dp, summed into D; second: the score gradient.
                        p[r * sp + j0 + b] = pass == 0 ? pr * dp[a][b] : pr * (dp[a][b] - dd[r]);
                    }
            }
            __syncthreads();
            if (pass == 0) {
                for (unsigned r = threadIdx.x; r < tq; r += ATT_THREADS) {
                    float acc = dd[r];
                    for (unsigned j = 0; j < tk; j++) acc += p[r * sp + j];
                    dd[r] = acc;
                }
            } else {
                for (unsigned i = threadIdx.x; i < (tq / 4) * (hq / 4); i += ATT_THREADS) {
                    unsigned r0 = i / (hq / 4) * 4, d0 = i % (hq / 4) * 4;
                    float acc[4][4];
                    att_block_load(acc, dq, hp, r0, d0, 0);
                    att_rows_by_cols(acc, p + r0 * sp, sp, k + d0, hp, tk);
                    att_block_store(acc, dq, hp, r0, d0);
                }
            }
            __syncthreads();
        }
    }
    for (unsigned i = threadIdx.x; i < tq * hs; i += ATT_THREADS) {
        unsigned r = i / hs, d = i % hs;
        size_t t = t0 + r;
        if (t < T) dqkv[(bi * T + t) * w + h * hs + d] += dq[r * hp + d] * scale;
    }
    for (unsigned r = threadIdx.x; r < tq; r += ATT_THREADS) {
        if (t0 + r < T) dsum[bh * T + t0 + r] = dd[r];
    }
}

// dk and dv (+= into dqkv) of key/value head g. Grid (b·nkv, key tiles of
// tk); a block owns tk keys and walks, for each query head of g's group in
// order, the query tiles of tq from its diagonal to the end.
extern "C" __global__ void flash_backward_kv(float* dqkv, const float* dsum, const float* dout,
                                             const float* qkv, const float* lse, unsigned t_len, unsigned c,
                                             unsigned nh, unsigned nkv, float scale, unsigned tq, unsigned tk) {
    extern __shared__ float att_smem[];
    size_t T = t_len;
    unsigned hs = c / nh, hq = (hs + 3) / 4 * 4, hp = hq + 1, sp = tk + 1;
    size_t w = (size_t)c + 2 * (size_t)nkv * hs, group = nh / nkv;
    size_t bkv = blockIdx.x, bi = bkv / nkv, g = bkv % nkv;
    size_t u0 = (size_t)blockIdx.y * tk;
    float* k = att_smem;
    float* v = k + tk * hp;
    float* dk = v + tk * hp;
    float* dv = dk + tk * hp;
    float* q = dv + tk * hp;
    float* dO = q + tq * hp;
    float* p = dO + tq * hp;
    float* ds = p + tq * sp;
    float* ls = ds + tq * sp;
    float* dd = ls + tq;
    const float* rows = qkv + bi * T * w;
    att_rows(k, rows + c + g * hs, w, u0, T, tk, hs, hq);
    att_rows(v, rows + c + (nkv + g) * hs, w, u0, T, tk, hs, hq);
    for (unsigned i = threadIdx.x; i < tk * hp; i += ATT_THREADS) {
        dk[i] = 0.0f;
        dv[i] = 0.0f;
    }
    for (size_t h = g * group; h < (g + 1) * group; h++) {
        size_t bh = bi * nh + h;
        for (size_t t0 = u0; t0 < T; t0 += tq) {
            att_rows(q, rows + h * hs, w, t0, T, tq, hs, hq);
            att_rows(dO, dout + bi * T * c + h * hs, c, t0, T, tq, hs, hq);
            for (unsigned r = threadIdx.x; r < tq; r += ATT_THREADS) {
                bool in = t0 + r < T;
                ls[r] = in ? lse[bh * T + t0 + r] : 0.0f;
                dd[r] = in ? dsum[bh * T + t0 + r] : 0.0f;
            }
            __syncthreads();
            for (unsigned i = threadIdx.x; i < (tq / 4) * (tk / 4); i += ATT_THREADS) {
                unsigned r0 = i / (tk / 4) * 4, j0 = i % (tk / 4) * 4;
                float sc[4][4] = {}, dp[4][4] = {};
                att_rows_by_rows(sc, q + r0 * hp, hp, k + j0 * hp, hp, hq);
                att_rows_by_rows(dp, dO + r0 * hp, hp, v + j0 * hp, hp, hq);
                for (unsigned a = 0; a < 4; a++)
                    for (unsigned b = 0; b < 4; b++) {
                        unsigned r = r0 + a, j = j0 + b;
                        bool valid = t0 + r < T && u0 + j <= t0 + r;
                        float pr = valid ? expf(sc[a][b] * scale - ls[r]) : 0.0f;
                        p[r * sp + j] = pr;
                        ds[r * sp + j] = pr * (dp[a][b] - dd[r]);
                    }
            }
            __syncthreads();
            for (unsigned i = threadIdx.x; i < (tk / 4) * (hq / 4); i += ATT_THREADS) {
                unsigned j0 = i / (hq / 4) * 4, d0 = i % (hq / 4) * 4;
                float acc[4][4];
                att_block_load(acc, dv, hp, j0, d0, 0);
                att_cols_by_cols(acc, p + j0, sp, dO + d0, hp, tq);
                att_block_store(acc, dv, hp, j0, d0);
                att_block_load(acc, dk, hp, j0, d0, 0);
                att_cols_by_cols(acc, ds + j0, sp, q + d0, hp, tq);
                att_block_store(acc, dk, hp, j0, d0);
            }
            __syncthreads();
        }
    }
    size_t kvc = (size_t)nkv * hs;
    for (unsigned i = threadIdx.x; i < tk * hs; i += ATT_THREADS) {
        unsigned j = i / hs, d = i % hs;
        size_t t = u0 + j;
        if (t < T) {
            size_t at = (bi * T + t) * w + c + g * hs + d;
            dqkv[at] += dk[j * hp + d] * scale;
            dqkv[at + kvc] += dv[j * hp + d];
        }
    }
}
