/* Serializing a 32 x 384 embedding response: our float formatter against snprintf("%.9g"),
 * run in the same process. Prints times and the ratio; gates nothing. */
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "server/json.h"

#define ROWS 32
#define DIM  384
#define REPS 200

int main(void)
{
    static float v[ROWS * DIM];
    uint32_t s = 1;
    for (int i = 0; i < ROWS * DIM; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    struct hs_buf b;
    hs_buf_init(&b, NULL, (size_t)ROWS * DIM * (HS_JSON_FLOAT_MAX + 1) + 1024);
    int64_t best_ours = INT64_MAX, best_printf = INT64_MAX;
    size_t bytes = 0;
    for (int r = 0; r < REPS; r++) {
        b.len = 0;
        int64_t t0 = hs_now_ns();
        hs_buf_putc(&b, '[');
        for (int i = 0; i < ROWS; i++) {
            if (i) hs_buf_putc(&b, ',');
            hs_buf_json_floats(&b, v + i * DIM, DIM);
        }
        hs_buf_putc(&b, ']');
        int64_t t1 = hs_now_ns();
        if (t1 - t0 < best_ours) best_ours = t1 - t0;
        bytes = b.len;
        b.len = 0;
        t0 = hs_now_ns();
        for (int i = 0; i < ROWS * DIM; i++) {
            hs_buf_reserve(&b, 32);
            b.len += (size_t)snprintf(b.data + b.len, 32, "%.9g,", (double)v[i]);
        }
        t1 = hs_now_ns();
        if (t1 - t0 < best_printf) best_printf = t1 - t0;
    }
    printf("json floats %dx%d: hs_json_float %.3f ms (%.1f ns/float, %zu bytes), "
           "snprintf %%.9g %.3f ms (%.1f ns/float); ratio %.2fx\n",
           ROWS, DIM, best_ours / 1e6, (double)best_ours / (ROWS * DIM), bytes, best_printf / 1e6,
           (double)best_printf / (ROWS * DIM), (double)best_printf / (double)best_ours);
    hs_buf_free(&b);
    return 0;
}
