// Reductions, deterministic: no atomics, two passes in a fixed order (as
// shaders/reduce.wgsl). Pass 1 (`reduce_partials`): each block sums (or sums
// the squares of) one chunk of BLOCK · ITEMS consecutive elements with a fixed
// tree. Pass 2 (`reduce_final`): one block folds the partials the same way
// into out[slot] · scale. `grad_clip_scale` turns the per-tensor squared norms
// into the global norm and the clipping factor.

#define ITEMS 16

extern "C" __global__ void reduce_partials(float* partials, const float* x, unsigned n, unsigned square) {
    __shared__ float sh[BLOCK];
    size_t start = (size_t)blockIdx.x * BLOCK * ITEMS;
    float acc = 0.0f;
    for (unsigned r = 0; r < ITEMS; r++) {
        size_t i = start + (size_t)r * BLOCK + threadIdx.x;
        if (i < n) {
            float v = x[i];
            acc = square ? fmaf(v, v, acc) : acc + v;
        }
    }
    float total = block_sum(acc, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

extern "C" __global__ void reduce_final(float* out, const float* partials, unsigned count, unsigned slot,
                                        float scale) {
    __shared__ float sh[BLOCK];
    float acc = 0.0f;
    for (unsigned i = threadIdx.x; i < count; i += BLOCK) acc += partials[i];
    float total = block_sum(acc, sh);
    if (threadIdx.x == 0) out[slot] = total * scale;
}

// Gradients held 1/unscale times their value: norm = sqrt(Σ partials[0..count]) (f64, in
// order) · unscale; factor unscale · min(1, max_norm / (norm + 1e-6)), unscale when
// max_norm <= 0.
extern "C" __global__ void grad_clip_scale(float* stats, const float* partials, unsigned count,
                                           unsigned norm_slot, unsigned scale_slot, float max_norm,
                                           float unscale) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double total = 0.0;
    for (unsigned i = 0; i < count; i++) total += (double)partials[i];
    float norm = (float)sqrt(total) * unscale;
    stats[norm_slot] = norm;
    float clip = (max_norm > 0.0f && norm > max_norm) ? max_norm / (norm + 1e-6f) : 1.0f;
    stats[scale_slot] = unscale * clip;
}
