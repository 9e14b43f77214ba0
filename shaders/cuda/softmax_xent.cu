// Fused softmax + cross-entropy over the first v columns of (n, vp) logits
// (vp: the padded vocabulary; padded columns get probability 0). One block per
// row with fixed trees for the max and the sum; the loss is computed from the
// logits (ln Σ + max − logit[target]) so it keeps precision when p underflows.

extern "C" __global__ void softmax_xent_forward(float* losses, float* probs, const float* logits,
                                                const unsigned* targets, unsigned n, unsigned v, unsigned vp) {
    __shared__ float sh[BLOCK];
    size_t row = blockIdx.x;
    if (row >= n) return;
    const float* l = logits + row * vp;
    float* p = probs + row * vp;
    float mx = __int_as_float(0xff800000);
    for (unsigned j = threadIdx.x; j < v; j += BLOCK) mx = fmaxf(mx, l[j]);
    mx = block_max(mx, sh);
    float acc = 0.0f;
    for (unsigned j = threadIdx.x; j < v; j += BLOCK) {
        float e = expf(l[j] - mx);
        p[j] = e;
        acc += e;
    }
    float sum = block_sum(acc, sh);
    float inv = 1.0f / sum;
    for (unsigned j = threadIdx.x; j < vp; j += BLOCK) p[j] = j < v ? p[j] * inv : 0.0f;
    if (threadIdx.x == 0) {
        unsigned tgt = min(targets[row], v - 1);
        losses[row] = logf(sum) + mx - l[tgt];
    }
}

// dlogits[i, j] += (probs[i, j] − [j == target_i]) · dloss for j < v.
extern "C" __global__ void softmax_xent_backward(float* dlogits, const float* probs, const unsigned* targets,
                                                 float dloss, unsigned n, unsigned v, unsigned vp) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * v) return;
    size_t row = i / v, j = i % v;
    float ind = j == targets[row] ? 1.0f : 0.0f;
    size_t at = row * vp + j;
    dlogits[at] += (probs[at] - ind) * dloss;
}
