// The parts of a linear layer around cuBLAS's GEMM: the forward's bias,
// broadcast into every output row before the GEMM accumulates onto it, and
// the backward's bias gradient, each column summed by one thread with rows in
// order (no atomics, deterministic).

extern "C" __global__ void bias_rows(float* out, const float* bias, unsigned n, unsigned oc) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n * oc) out[i] = bias[i % oc];
}

// dbias[j] += Σ_i dout[i, j].
extern "C" __global__ void column_sums(float* dbias, const float* dout, unsigned n, unsigned oc) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= oc) return;
    float acc = dbias[j];
    for (size_t i = 0; i < n; i++) acc += dout[i * oc + j];
    dbias[j] = acc;
}
