// Token + position encoder (llm.c's encoder_forward / encoder_backward).
// The token buffer holds four regions of `cap` words (see compute/cuda/memory.rs):
// ids | positions sorted by token (stable) | each distinct token | where its
// positions start (groups + 1 entries). The backward pass gives each
// (distinct token, channel) to one thread, which adds that token's positions
// in order: no atomics, the CPU backend's order, deterministic.

extern "C" __global__ void encoder_forward(float* out, const unsigned* tokens, const float* wte,
                                           const float* wpe, unsigned bt, unsigned t_len, unsigned c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)bt * c) return;
    size_t row = i / c, ch = i % c;
    size_t tok = tokens[row];
    size_t t = row % t_len;
    out[i] = wte[tok * c + ch] + wpe[t * c + ch];
}

// dwpe[t, ch] += Σ_b dout[b, t, ch], batch rows in order.
extern "C" __global__ void encoder_backward_wpe(float* dwpe, const float* dout, unsigned b, unsigned t_len,
                                                unsigned c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)t_len * c) return;
    size_t t = i / c, ch = i % c;
    float acc = dwpe[i];
    for (unsigned bi = 0; bi < b; bi++) {
        acc += dout[((size_t)bi * t_len + t) * c + ch];
    }
    dwpe[i] = acc;
}

// dwte[tok, ch] += Σ dout[p, ch] over the positions p holding tok, in order.
extern "C" __global__ void encoder_backward_wte(float* dwte, const float* dout, const unsigned* tokens,
                                                unsigned cap, unsigned groups, unsigned c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)groups * c) return;
    size_t g = i / c, ch = i % c;
    const unsigned* order = tokens + cap;
    const unsigned* group_token = tokens + 2 * (size_t)cap;
    const unsigned* group_start = tokens + 3 * (size_t)cap;
    size_t at = (size_t)group_token[g] * c + ch;
    float acc = dwte[at];
    for (unsigned k = group_start[g]; k < group_start[g + 1]; k++) {
        acc += dout[(size_t)order[k] * c + ch];
    }
    dwte[at] = acc;
}
