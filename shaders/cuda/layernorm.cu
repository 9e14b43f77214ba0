// LayerNorm over the last axis of an (n, c) tensor, eps = 1e-5 (llm.c's
// layernorm_forward / layernorm_backward). One block of BLOCK threads per row;
// row sums use a fixed tree; parameter gradients give a block 32 channels and
// 32 × 32 threads, thread (x, y) summing rows y, y + 32, … of channel x in
// row order and thread (x, 0) adding the 32 partials in order of y: no
// atomics, deterministic.

extern "C" __global__ void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                             const float* w, const float* b, unsigned n, unsigned c) {
    __shared__ float sh[BLOCK];
    size_t row = blockIdx.x;
    if (row >= n) return;
    const float* x = inp + row * c;
    float acc = 0.0f;
    for (unsigned j = threadIdx.x; j < c; j += BLOCK) acc += x[j];
    float mu = block_sum(acc, sh) / (float)c;
    acc = 0.0f;
    for (unsigned j = threadIdx.x; j < c; j += BLOCK) {
        float d = x[j] - mu;
        acc += d * d;
    }
    float var = block_sum(acc, sh) / (float)c;
    float rs = 1.0f / sqrtf(var + 1e-5f);
    for (unsigned j = threadIdx.x; j < c; j += BLOCK) {
        out[row * c + j] = (x[j] - mu) * rs * w[j] + b[j];
    }
    if (threadIdx.x == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

// dinp += (dnorm − mean(dnorm) − norm · mean(dnorm · norm)) · rstd, per row.
extern "C" __global__ void layernorm_backward_input(float* dinp, const float* dout, const float* inp,
                                                    const float* w, const float* mean, const float* rstd,
                                                    unsigned n, unsigned c) {
    __shared__ float sh[BLOCK];
    size_t row = blockIdx.x;
    if (row >= n) return;
    const float* x = inp + row * c;
    const float* d = dout + row * c;
    float mu = mean[row], rs = rstd[row];
    float a1 = 0.0f, a2 = 0.0f;
    for (unsigned j = threadIdx.x; j < c; j += BLOCK) {
        float norm = (x[j] - mu) * rs;
        float dn = w[j] * d[j];
        a1 += dn;
        a2 += dn * norm;
    }
    float m1 = block_sum(a1, sh) / (float)c;
    float m2 = block_sum(a2, sh) / (float)c;
    for (unsigned j = threadIdx.x; j < c; j += BLOCK) {
        float norm = (x[j] - mu) * rs;
        float dn = w[j] * d[j];
        dinp[row * c + j] += (dn - m1 - norm * m2) * rs;
    }
}

// dweight[j] += Σ_i norm[i, j] · dout[i, j]; dbias[j] += Σ_i dout[i, j].
// Block (COLS, LANES), one block per COLS channels: two column reductions.
extern "C" __global__ void layernorm_backward_params(float* dw, float* db, const float* dout, const float* inp,
                                                     const float* mean, const float* rstd, unsigned n,
                                                     unsigned c) {
    __shared__ float part[LANES][COLS + 1];
    unsigned x = threadIdx.x, y = threadIdx.y;
    size_t j = (size_t)blockIdx.x * COLS + x;
    float aw = 0.0f, ab = 0.0f;
    if (j < c) {
        for (size_t i = y; i < n; i += LANES) {
            float d = dout[i * c + j];
            aw += (inp[i * c + j] - mean[i]) * rstd[i] * d;
            ab += d;
        }
    }
    float sw = lanes_sum(aw, part);
    float sb = lanes_sum(ab, part);
    if (y == 0 && j < c) {
        dw[j] += sw;
        db[j] += sb;
    }
}
