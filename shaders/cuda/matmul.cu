// The parts of a linear layer around cuBLAS's GEMM: the forward's bias,
// broadcast into every output row before the GEMM accumulates onto it, and
// the backward's bias gradient, a column reduction (block.cuh's lanes_sum:
// no atomics, the same order, so the same bits, on every run).

extern "C" __global__ void bias_rows(float* out, const float* bias, unsigned n, unsigned oc) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n * oc) out[i] = bias[i % oc];
}

// dbias[j] += Σ_i dout[i, j]. Block (COLS, LANES), one block per COLS columns.
extern "C" __global__ void column_sums(float* dbias, const float* dout, unsigned n, unsigned oc) {
    __shared__ float part[LANES][COLS + 1];
    unsigned x = threadIdx.x, y = threadIdx.y;
    size_t j = (size_t)blockIdx.x * COLS + x;
    float acc = 0.0f;
    if (j < oc) {
        for (size_t i = y; i < n; i += LANES) acc += dout[i * oc + j];
    }
    float sum = lanes_sum(acc, part);
    if (y == 0 && j < oc) dbias[j] += sum;
}
