// Times llm.c's train_gpt2.c (fp32 CPU reference) on an arbitrary GPT shape,
// so `murmur bench train` can be compared with it side by side.
// Build with scripts/bench-llmc.sh, which points the include path at a local
// llm.c checkout (it is not vendored here).
#define TESTING
#include "train_gpt2.c"

static uint64_t bench_rng = 88172645463325252ull;
static float bench_uniform(void) {
    bench_rng ^= bench_rng << 13; bench_rng ^= bench_rng >> 7; bench_rng ^= bench_rng << 17;
    return (float)((bench_rng >> 40) / 16777216.0);
}

int main(int argc, char** argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: %s LAYERS CHANNELS HEADS VOCAB BATCH SEQ WARMUP STEPS\n", argv[0]);
        return 2;
    }
    int L = atoi(argv[1]), C = atoi(argv[2]), NH = atoi(argv[3]), V = atoi(argv[4]);
    int B = atoi(argv[5]), T = atoi(argv[6]), warmup = atoi(argv[7]), steps = atoi(argv[8]);
    GPT2 model;
    model.config.max_seq_len = T;
    model.config.vocab_size = V;
    model.config.padded_vocab_size = (V + 127) / 128 * 128;
    model.config.num_layers = L;
    model.config.num_heads = NH;
    model.config.channels = C;
    fill_in_parameter_sizes(model.param_sizes, model.config);
    model.num_parameters = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) model.num_parameters += model.param_sizes[i];
    model.params_memory = malloc_and_point_parameters(&model.params, model.param_sizes);
    for (size_t i = 0; i < model.num_parameters; i++) model.params_memory[i] = (bench_uniform() - 0.5f) * 0.04f;
    model.acts_memory = NULL; model.grads_memory = NULL; model.m_memory = NULL; model.v_memory = NULL;
    model.grads_acts_memory = NULL; model.inputs = NULL; model.targets = NULL;
    model.batch_size = 0; model.seq_len = 0; model.mean_loss = -1.0f;

    int* x = (int*)malloc(B * T * sizeof(int));
    int* y = (int*)malloc(B * T * sizeof(int));
    struct timespec t0, t1;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < B * T; i++) { x[i] = (int)(bench_uniform() * V) % V; y[i] = (int)(bench_uniform() * V) % V; }
        gpt2_forward(&model, x, y, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, s + 1);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    double tokens = (double)steps * B * T;
    double flops = 6.0 * model.num_parameters + 6.0 * L * C * T;
    printf("{\"backend\":\"llm.c train_gpt2.c\",\"layers\":%d,\"channels\":%d,\"heads\":%d,\"vocab\":%d,"
           "\"batch\":%d,\"seq\":%d,\"params\":%zu,\"steps\":%d,\"ms_per_step\":%.3f,\"tokens_per_s\":%.1f,"
           "\"gflops\":%.2f}\n", L, C, NH, V, B, T, model.num_parameters, steps, secs * 1e3 / steps,
           tokens / secs, tokens * flops / secs / 1e9);
    gpt2_free(&model);
    free(x); free(y);
    return 0;
}
