// Prepended to every program in shaders/cuda (compute/cuda/programs.rs):
// the block size of the row kernels and their fixed-tree block reductions,
// which give every thread of a BLOCK-thread block the block's sum (or max)
// in the same order on every run; and the column reductions' lanes.

#define BLOCK 256

__device__ float block_sum(float x, float* sh) {
    sh[threadIdx.x] = x;
    __syncthreads();
    for (unsigned s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_max(float x, float* sh) {
    sh[threadIdx.x] = x;
    __syncthreads();
    for (unsigned s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// Column reductions (bias, LayerNorm and RMSNorm parameter gradients): a
// block of COLS columns × LANES row lanes, thread (x, y) summing rows y,
// y + LANES, … of column x in row order; lanes_sum then gives thread (x, 0)
// the LANES partials of column x added in order of y (0 elsewhere). Every
// thread of the block calls it; `part` is the block's shared scratch.
#define COLS 32
#define LANES 32

__device__ float lanes_sum(float acc, float part[LANES][COLS + 1]) {
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    float sum = 0.0f;
    if (threadIdx.y == 0) {
        for (unsigned l = 0; l < LANES; l++) sum += part[l][threadIdx.x];
    }
    __syncthreads();
    return sum;
}
