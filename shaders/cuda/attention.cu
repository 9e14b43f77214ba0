// Causal self-attention (llm.c's attention_forward / attention_backward)
// with grouped-query heads, naive and deterministic: qkv is (b, t, W) laid
// out [q (nh heads) | k (nkv heads) | v (nkv heads)] with W = c + 2·nkv·hs,
// query head h reading key/value head h / (nh / nkv); att (b, nh, t, t)
// keeps the softmaxed scores. Every output
// element is one thread summing in a fixed order (the scores in shared-memory
// tiles); softmax rows are one block with a fixed tree. No atomics.

// scores[bh, t, t2] = q[t]·k[t2] · scale for t2 ≤ t (0 above the diagonal);
// with `from_dout`, datt[bh, t, t2] = dout[t]·v[t2] instead. A block owns a
// TILE × TILE tile of (t, t2) for one bh (grid: bh, tile of t, tile of t2):
// the tile's TILE left rows (q or dout) and TILE right rows (k or v) pass
// through shared memory CHUNK channels at a time, and each of its TILE × TROWS
// threads sums TILE / TROWS outputs over the channels in order (the order
// one thread per output used). Tiles wholly above the diagonal only write
// their zeros.
#define TILE 32
#define TROWS 8
#define CHUNK 64
extern "C" __global__ void attention_scores(float* scores, const float* qkv, const float* dout, unsigned b,
                                            unsigned t_len, unsigned c, unsigned nh, unsigned nkv,
                                            float scale, unsigned from_dout) {
    __shared__ float left[TILE][CHUNK + 1];
    __shared__ float right[TILE][CHUNK + 1];
    size_t T = t_len;
    size_t bh = blockIdx.x, bi = bh / nh, h = bh % nh;
    size_t t0 = (size_t)blockIdx.y * TILE, u0 = (size_t)blockIdx.z * TILE;
    size_t hs = c / nh, w = (size_t)c + 2 * (size_t)nkv * hs, g = h / (nh / nkv);
    unsigned x = threadIdx.x, y = threadIdx.y;
    float* out = scores + bh * T * T;
    if (u0 > t0 + TILE - 1) {
        for (unsigned r = y; r < TILE; r += TROWS) {
            size_t t = t0 + r, t2 = u0 + x;
            if (t < T && t2 < T) out[t * T + t2] = 0.0f;
        }
        return;
    }
    // Left rows: dout (b, t, c) or q; right rows: v or k, both in qkv (b, t, W).
    const float* lbase = from_dout ? dout + h * hs : qkv + h * hs;
    size_t lstride = from_dout ? (size_t)c : w;
    const float* rbase = qkv + (size_t)c + (from_dout ? nkv * hs : 0) + g * hs;
    float acc[TILE / TROWS];
    for (unsigned j = 0; j < TILE / TROWS; j++) acc[j] = 0.0f;
    for (size_t k0 = 0; k0 < hs; k0 += CHUNK) {
        for (unsigned r = y; r < TILE; r += TROWS) {
            size_t t = t0 + r, t2 = u0 + r;
            for (unsigned kk = x; kk < CHUNK; kk += TILE) {
                size_t k = k0 + kk;
                left[r][kk] = (k < hs && t < T) ? lbase[(bi * T + t) * lstride + k] : 0.0f;
                right[r][kk] = (k < hs && t2 < T) ? rbase[(bi * T + t2) * w + k] : 0.0f;
            }
        }
        __syncthreads();
        size_t kn = hs - k0 < CHUNK ? hs - k0 : CHUNK;
        for (size_t kk = 0; kk < kn; kk++) {
            float rv = right[x][kk];
            for (unsigned j = 0; j < TILE / TROWS; j++) acc[j] += left[y + j * TROWS][kk] * rv;
        }
        __syncthreads();
    }
    for (unsigned j = 0; j < TILE / TROWS; j++) {
        size_t t = t0 + y + j * TROWS, t2 = u0 + x;
        if (t < T && t2 < T) out[t * T + t2] = t2 > t ? 0.0f : (from_dout ? acc[j] : acc[j] * scale);
    }
}

// Row r = (bh, t) of att: softmax over t2 ≤ t, zero above the diagonal.
extern "C" __global__ void attention_softmax(float* att, unsigned rows, unsigned t_len) {
    __shared__ float sh[BLOCK];
    size_t r = blockIdx.x;
    if (r >= rows) return;
    unsigned valid = (unsigned)(r % t_len) + 1;
    float* row = att + r * t_len;
    float mx = __int_as_float(0xff800000);
    for (unsigned j = threadIdx.x; j < valid; j += BLOCK) mx = fmaxf(mx, row[j]);
    mx = block_max(mx, sh);
    float acc = 0.0f;
    for (unsigned j = threadIdx.x; j < valid; j += BLOCK) {
        float e = expf(row[j] - mx);
        row[j] = e;
        acc += e;
    }
    float inv = 1.0f / block_sum(acc, sh);
    for (unsigned j = threadIdx.x; j < t_len; j += BLOCK) row[j] = j < valid ? row[j] * inv : 0.0f;
}

// out[b, t, h, k] = Σ_{t2 ≤ t} att[bh, t, t2] · v[t2, g(h), k].
extern "C" __global__ void attention_values(float* out, const float* att, const float* qkv, unsigned b,
                                            unsigned t_len, unsigned c, unsigned nh, unsigned nkv) {
    size_t T = t_len;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)b * T * c) return;
    size_t d = i % c, t = (i / c) % T, bi = i / ((size_t)c * T);
    size_t hs = c / nh, h = d / hs, k = d % hs, w = (size_t)c + 2 * (size_t)nkv * hs, g = h / (nh / nkv);
    const float* row = att + ((bi * nh + h) * T + t) * T;
    const float* v = qkv + (size_t)c + nkv * hs + g * hs + k;
    float acc = 0.0f;
    for (size_t t2 = 0; t2 <= t; t2++) acc += row[t2] * v[(bi * T + t2) * w];
    out[i] = acc;
}

// Through the softmax, in place: datt[t2] ← att[t2] · (datt[t2] − Σ att·datt) · scale.
extern "C" __global__ void attention_softmax_backward(float* datt, const float* att, unsigned rows,
                                                      unsigned t_len, float scale) {
    __shared__ float sh[BLOCK];
    size_t r = blockIdx.x;
    if (r >= rows) return;
    unsigned valid = (unsigned)(r % t_len) + 1;
    float* d = datt + r * t_len;
    const float* a = att + r * t_len;
    float acc = 0.0f;
    for (unsigned j = threadIdx.x; j < valid; j += BLOCK) acc += a[j] * d[j];
    float s = block_sum(acc, sh);
    for (unsigned j = threadIdx.x; j < valid; j += BLOCK) d[j] = a[j] * (d[j] - s) * scale;
}

// dq[t] += Σ_{t2 ≤ t} dpre[t, t2] · k[t2] (k of head g(h)).
extern "C" __global__ void attention_backward_q(float* dqkv, const float* dpre, const float* qkv, unsigned b,
                                                unsigned t_len, unsigned c, unsigned nh, unsigned nkv) {
    size_t T = t_len;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)b * T * c) return;
    size_t d = i % c, t = (i / c) % T, bi = i / ((size_t)c * T);
    size_t hs = c / nh, h = d / hs, k = d % hs, w = (size_t)c + 2 * (size_t)nkv * hs, g = h / (nh / nkv);
    const float* row = dpre + ((bi * nh + h) * T + t) * T;
    const float* key = qkv + (size_t)c + g * hs + k;
    size_t at = (bi * T + t) * w + h * hs + k;
    float acc = dqkv[at];
    for (size_t t2 = 0; t2 <= t; t2++) acc += row[t2] * key[(bi * T + t2) * w];
    dqkv[at] = acc;
}

// For key/value head g and each query head h of its group, in order of h
// then t: dk[t2] += Σ_{t ≥ t2} dpre[h, t, t2] · q_h[t]; dv[t2] += Σ_{t ≥ t2}
// att[h, t, t2] · dout_h[t]. One thread per (b, t2, g, k).
extern "C" __global__ void attention_backward_kv(float* dqkv, const float* dpre, const float* att,
                                                 const float* dout, const float* qkv, unsigned b,
                                                 unsigned t_len, unsigned c, unsigned nh, unsigned nkv) {
    size_t T = t_len;
    size_t hs = c / nh, kvc = (size_t)nkv * hs, w = (size_t)c + 2 * kvc, group = nh / nkv;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)b * T * kvc) return;
    size_t d = i % kvc, t2 = (i / kvc) % T, bi = i / (kvc * T);
    size_t g = d / hs, k = d % hs;
    size_t at = (bi * T + t2) * w + c + g * hs + k;
    float dk = dqkv[at], dv = dqkv[at + kvc];
    for (size_t h = g * group; h < (g + 1) * group; h++) {
        for (size_t t = t2; t < T; t++) {
            size_t r = ((bi * nh + h) * T + t) * T + t2;
            dk += dpre[r] * qkv[(bi * T + t) * w + h * hs + k];
            dv += att[r] * dout[(bi * T + t) * c + h * hs + k];
        }
    }
    dqkv[at] = dk;
    dqkv[at + kvc] = dv;
}
