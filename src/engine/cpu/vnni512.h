/* hetserve — the AVX-512 VNNI pieces the int8 kernels share (qgemm.c, attention_avx512.c).
 * Internal to engine/cpu. */
#ifndef HS_ENGINE_CPU_VNNI512_H
#define HS_ENGINE_CPU_VNNI512_H

#include <immintrin.h>

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

/* c + the 4-product sums of a (u8) x b (s8) per int32 lane. gcc 12's _mm512_dpbusd_epi32 does
 * not tie the accumulator to the instruction's destination: it copied every accumulator once a
 * step (two instructions for each multiply, half the kernel's rate); the asm ties it. */
VNNI_TARGET static inline __m512i hs__dpbusd(__m512i c, __m512i a, __m512i b)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(c) : "v"(a), "v"(b));
    return c;
}

#endif
