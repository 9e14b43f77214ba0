// The parts of a linear layer around cuBLAS's GEMM: the forward's bias,
// broadcast into every output row before the GEMM accumulates onto it, and
// the backward's bias gradient. Column sums give a block 32 columns and
// 32 × 32 threads: thread (x, y) sums rows y, y + 32, … of column x in row
// order, then thread (x, 0) adds the 32 partial sums in order of y (no
// atomics: the same order, so the same bits, on every run).

#define COLS 32
#define LANES 32

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
    part[y][x] = acc;
    __syncthreads();
    if (y == 0 && j < oc) {
        float sum = 0.0f;
        for (unsigned l = 0; l < LANES; l++) sum += part[l][x];
        dbias[j] += sum;
    }
}
