// GELU, tanh approximation, with the tanh argument clamped to ±GELU_CLAMP
// (compute/cpu/kernels.rs: GELU_TANH_CLAMP) so no input overflows; the tanh
// term's derivative is 0 where its argument was clamped.

#define GELU_SCALE 0.7978846f
#define GELU_CLAMP 10.0f

extern "C" __global__ void gelu_forward(float* out, const float* inp, unsigned n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    float u = fminf(fmaxf(GELU_SCALE * (x + 0.044715f * x * x * x), -GELU_CLAMP), GELU_CLAMP);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
}

extern "C" __global__ void gelu_backward(float* dinp, const float* inp, const float* dout, unsigned n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = tanhf(fminf(fmaxf(u, -GELU_CLAMP), GELU_CLAMP));
    float sech2 = fabsf(u) < GELU_CLAMP ? 1.0f - th * th : 0.0f;
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += grad * dout[i];
}
