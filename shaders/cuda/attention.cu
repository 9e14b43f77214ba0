// Causal multi-head self-attention (llm.c's attention_forward /
// attention_backward), naive and deterministic: qkv is (b, t, 3c) laid out
// [q | k | v], att (b, nh, t, t) keeps the softmaxed scores. Every output
// element is one thread summing in a fixed order; softmax rows are one block
// with a fixed tree. No atomics.

#define BLOCK 256

__device__ float block_sum(float x, float* sh) {
    sh[threadIdx.x] = x;
    __syncthreads();
    for (unsigned s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_max(float x, float* sh) {
    sh[threadIdx.x] = x;
    __syncthreads();
    for (unsigned s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// scores[bh, t, t2] = q[t]·k[t2] · scale for t2 ≤ t (0 above the diagonal);
// with `from_dout`, datt[bh, t, t2] = dout[t]·v[t2] instead.
extern "C" __global__ void attention_scores(float* scores, const float* qkv, const float* dout, unsigned b,
                                            unsigned t_len, unsigned c, unsigned nh, float scale,
                                            unsigned from_dout) {
    size_t T = t_len;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)b * nh * T * T) return;
    size_t t2 = i % T, t = (i / T) % T, bh = i / (T * T);
    size_t bi = bh / nh, h = bh % nh, hs = c / nh, c3 = 3 * (size_t)c;
    if (t2 > t) {
        scores[i] = 0.0f;
        return;
    }
    float acc = 0.0f;
    if (from_dout) {
        const float* d = dout + (bi * T + t) * c + h * hs;
        const float* v = qkv + (bi * T + t2) * c3 + 2 * (size_t)c + h * hs;
        for (size_t k = 0; k < hs; k++) acc += d[k] * v[k];
        scores[i] = acc;
    } else {
        const float* q = qkv + (bi * T + t) * c3 + h * hs;
        const float* kk = qkv + (bi * T + t2) * c3 + c + h * hs;
        for (size_t k = 0; k < hs; k++) acc += q[k] * kk[k];
        scores[i] = acc * scale;
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

// out[b, t, h, k] = Σ_{t2 ≤ t} att[bh, t, t2] · v[t2, h, k].
extern "C" __global__ void attention_values(float* out, const float* att, const float* qkv, unsigned b,
                                            unsigned t_len, unsigned c, unsigned nh) {
    size_t T = t_len;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)b * T * c) return;
    size_t d = i % c, t = (i / c) % T, bi = i / ((size_t)c * T);
    size_t hs = c / nh, h = d / hs, k = d % hs, c3 = 3 * (size_t)c;
    const float* row = att + ((bi * nh + h) * T + t) * T;
    float acc = 0.0f;
    for (size_t t2 = 0; t2 <= t; t2++) acc += row[t2] * qkv[(bi * T + t2) * c3 + 2 * (size_t)c + h * hs + k];
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

// dq[t] += Σ_{t2 ≤ t} dpre[t, t2] · k[t2].
extern "C" __global__ void attention_backward_q(float* dqkv, const float* dpre, const float* qkv, unsigned b,
                                                unsigned t_len, unsigned c, unsigned nh) {
    size_t T = t_len;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)b * T * c) return;
    size_t d = i % c, t = (i / c) % T, bi = i / ((size_t)c * T);
    size_t hs = c / nh, h = d / hs, k = d % hs, c3 = 3 * (size_t)c;
    const float* row = dpre + ((bi * nh + h) * T + t) * T;
    size_t at = (bi * T + t) * c3 + h * hs + k;
    float acc = dqkv[at];
    for (size_t t2 = 0; t2 <= t; t2++) acc += row[t2] * qkv[(bi * T + t2) * c3 + c + h * hs + k];
    dqkv[at] = acc;
}

// dk[t2] += Σ_{t ≥ t2} dpre[t, t2] · q[t]; dv[t2] += Σ_{t ≥ t2} att[t, t2] · dout[t].
extern "C" __global__ void attention_backward_kv(float* dqkv, const float* dpre, const float* att,
                                                 const float* dout, const float* qkv, unsigned b,
                                                 unsigned t_len, unsigned c, unsigned nh) {
    size_t T = t_len;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)b * T * c) return;
    size_t d = i % c, t2 = (i / c) % T, bi = i / ((size_t)c * T);
    size_t hs = c / nh, h = d / hs, k = d % hs, c3 = 3 * (size_t)c;
    size_t at = (bi * T + t2) * c3 + c + h * hs + k;
    float dk = dqkv[at], dv = dqkv[at + c];
    for (size_t t = t2; t < T; t++) {
        size_t r = ((bi * nh + h) * T + t) * T + t2;
        dk += dpre[r] * qkv[(bi * T + t) * c3 + h * hs + k];
        dv += att[r] * dout[(bi * T + t) * c + h * hs + k];
    }
    dqkv[at] = dk;
    dqkv[at + c] = dv;
}
