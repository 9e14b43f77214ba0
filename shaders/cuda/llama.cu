// The Llama architecture's kernels: RMSNorm (eps = 1e-5), rotary position
// embeddings (Hugging Face's rotate-half layout) and the SwiGLU gate.
// RMSNorm: one block of BLOCK threads per row, the row's sums by a fixed
// tree in shared memory; the weight gradient by a block of 32 × 32 threads
// per 32 channels, thread (x, y) summing rows y, y + 32, … in order and
// (x, 0) adding the 32 partials in order of y (no atomics, deterministic).
// RoPE: one thread per channel pair of a rotated head of a row, in place;
// the angle pos·θ^(−2i/hs) and its cos and sin in double, as the CPU
// backend's table. SwiGLU: one thread per output element.

#define EPS 1e-5f

// out(n, c) = x · rstd · w per row, rstd = 1/√(mean(x²) + eps) kept in rstd (n).
extern "C" __global__ void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w,
                                           unsigned n, unsigned c) {
    __shared__ float sh[BLOCK];
    size_t row = blockIdx.x;
    if (row >= n) return;
    const float* x = inp + row * c;
    float acc = 0.0f;
    for (unsigned j = threadIdx.x; j < c; j += BLOCK) acc = fmaf(x[j], x[j], acc);
    float rs = 1.0f / sqrtf(block_sum(acc, sh) / (float)c + EPS);
    for (unsigned j = threadIdx.x; j < c; j += BLOCK) out[row * c + j] = x[j] * rs * w[j];
    if (threadIdx.x == 0) rstd[row] = rs;
}

// dinp += rs·w·d − x·rs³·mean(w·d·x), per row.
extern "C" __global__ void rmsnorm_backward_input(float* dinp, const float* dout, const float* inp,
                                                  const float* w, const float* rstd, unsigned n, unsigned c) {
    __shared__ float sh[BLOCK];
    size_t row = blockIdx.x;
    if (row >= n) return;
    const float* x = inp + row * c;
    const float* d = dout + row * c;
    float rs = rstd[row];
    float acc = 0.0f;
    for (unsigned j = threadIdx.x; j < c; j += BLOCK) acc = fmaf(w[j] * d[j], x[j], acc);
    float coef = rs * rs * rs * block_sum(acc, sh) / (float)c;
    for (unsigned j = threadIdx.x; j < c; j += BLOCK) dinp[row * c + j] += rs * w[j] * d[j] - x[j] * coef;
}

// dw[j] += Σ_rows dout[r, j] · x[r, j] · rstd[r], a column reduction.
extern "C" __global__ void rmsnorm_backward_params(float* dw, const float* dout, const float* inp,
                                                   const float* rstd, unsigned n, unsigned c) {
    __shared__ float part[LANES][COLS + 1];
    unsigned x = threadIdx.x, y = threadIdx.y;
    size_t j = (size_t)blockIdx.x * COLS + x;
    float acc = 0.0f;
    if (j < c) {
        for (size_t r = y; r < n; r += LANES) acc = fmaf(dout[r * c + j] * inp[r * c + j], rstd[r], acc);
    }
    float sum = lanes_sum(acc, part);
    if (y == 0 && j < c) dw[j] += sum;
}

// In place on qkv (rows of `width` floats): pair (i, i + hs/2) of each of
// the first `heads` heads (q then k) of row r rotated by sign·pos·θ^(−2i/hs),
// pos = r mod t. One thread per pair; grid (rows, pairs of a row / BLOCK).
extern "C" __global__ void rope(float* qkv, unsigned rows, unsigned t_len, unsigned heads, unsigned hs,
                                unsigned width, float theta, float sign) {
    unsigned half = hs / 2;
    size_t r = blockIdx.x;
    size_t k = (size_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (r >= rows || k >= (size_t)half * heads) return;
    size_t head = k / half, i = k % half;
    double pos = (double)(r % t_len);
    double inv_freq = pow((double)theta, -(double)(2 * i) / (double)hs);
    double s, cs;
    sincos(pos * inv_freq, &s, &cs);
    float c = (float)cs, sn = sign * (float)s;
    float* at = qkv + r * width + head * hs + i;
    float x0 = at[0], x1 = at[half];
    at[0] = x0 * c - x1 * sn;
    at[half] = x1 * c + x0 * sn;
}

// out(rows, h) = silu(gate)·up; inp rows are [gate (h) | up (h)].
extern "C" __global__ void swiglu_forward(float* out, const float* inp, unsigned n, unsigned h) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * h) return;
    size_t r = i / h, j = i % h;
    float g = inp[r * 2 * h + j], u = inp[r * 2 * h + h + j];
    float sig = 1.0f / (1.0f + expf(-g));
    out[i] = g * sig * u;
}

// dinp (rows, 2h) written: [dgate | dup] of silu(gate)·up given dout (rows, h).
extern "C" __global__ void swiglu_backward(float* dinp, const float* inp, const float* dout, unsigned n,
                                           unsigned h) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * h) return;
    size_t r = i / h, j = i % h;
    size_t at = r * 2 * h + j;
    float g = inp[at], u = inp[at + h], d = dout[i];
    float sig = 1.0f / (1.0f + expf(-g));
    dinp[at] = d * u * sig * (1.0f + g * (1.0f - sig));
    dinp[at + h] = d * g * sig;
}
