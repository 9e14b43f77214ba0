// Prepended to every program in shaders/cuda (compute/cuda/programs.rs):
// the block size of the row kernels and their fixed-tree block reductions,
// which give every thread of a BLOCK-thread block the block's sum (or max)
// in the same order on every run.

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
