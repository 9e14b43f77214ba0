// AdamW (decoupled weight decay) on one tensor; the gradient is first
// multiplied by stats[scale_slot] (the clipping factor). bc1 = 1 − β1^step and
// bc2 = 1 − β2^step come from the host, computed as the CPU backend does.

extern "C" __global__ void adamw_update(float* param, const float* grad, float* m, float* v, const float* stats,
                                        unsigned scale_slot, unsigned n, float lr, float beta1, float beta2,
                                        float eps, float weight_decay, float bc1, float bc2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = grad[i] * stats[scale_slot];
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1;
    float vhat = vi / bc2;
    float p = param[i];
    param[i] = p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
}
