/* test_cuda_emu: the kernel checks of cuda_kernel_checks.h (test_cuda's, on a GPU) on the CPU,
 * the CUDA engine's kernels compiled from their own source and run by the emulator of emu.h.
 * Built wherever the CUDA toolkit is (its headers), with or without a GPU. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/tensor.h"
#include "engine/cuda/cuda_impl.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float urand(void) /* [-1, 1): test_cuda's generator */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

#define REQUIRE_GPU()                                                                              \
    do {                                                                                           \
    } while (0)

/* (the engine's table comes from the CPU engine, not linked here: the checks only need the
 * kernel and the reference to read the same table) */
void hs__cuda_rope_table(float *cs, int positions, int rot_dim, float theta, float div)
{
    const int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)rot_dim);
        if (div > 0.0f && div != 1.0f) inv /= div;
        for (int p = 0; p < positions; p++) {
            cs[p * rot_dim + i] = cosf((float)p * inv);
            cs[p * rot_dim + half + i] = sinf((float)p * inv);
        }
    }
}

#include "engine/cuda_kernel_checks.h"

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kernel_attention),
        cmocka_unit_test(kernel_qk_rope),
        cmocka_unit_test(kernel_norms),
        cmocka_unit_test(kernel_glu_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
