#include <stdio.h>
#include "common.h"

/* prints llama-batched-bench's header and table shape (one row) for build-order tests */
int main(void) {
    common_init();
    printf("llama_batched_bench: n_kv_max = 4096, n_batch = 2048, n_ubatch = 512, flash_attn = 1, is_pp_shared = 0, n_gpu_layers = 99, n_threads = 1, n_threads_batch = 1\n\n");
    printf("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n");
    printf("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n");
    printf("|    16 |      4 |    1 |     20 |    0.001 | 16000.00 |    0.001 |  4000.00 |    0.002 | 10000.00 |\n");
    return 0;
}
