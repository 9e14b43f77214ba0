// Residual connections: out = a + b. The backward needs no kernel: each
// branch's backward adds into the residual stream's gradient.

extern "C" __global__ void residual_forward(float* out, const float* a, const float* b, unsigned n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
