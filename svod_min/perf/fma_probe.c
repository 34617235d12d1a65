/* Probes of one core's float32 FMA throughput and of its clock, for svod_min.perf.core_peak.
 *
 * svod_fma_probe: CHAINS independent chains of a = a * b + c on vectors of VEC_BYTES bytes. With
 * -ffp-contract=fast each step is one FMA; enough chains to cover the FMA latency (4-5 cycles) on
 * every unit keep the units busy, so the rate is units x lanes x 2 FLOP per cycle.
 * svod_clock_probe: dependent register-to-register adds, one per cycle on every x86-64 core since
 * the first, so their rate is the clock this core runs at now (turbo included); 0 elsewhere. An add
 * of an immediate would not do: newer cores fold those chains in the renamer, several per cycle.
 */
#ifndef VEC_BYTES
#define VEC_BYTES 16
#endif
#define CHAINS 16

typedef float vf __attribute__((vector_size(VEC_BYTES)));

double svod_fma_probe(long iters, float *out) {
    vf a[CHAINS];
    vf b, c;
    for (int l = 0; l < (int)(VEC_BYTES / 4); l++) {
        b[l] = 0.999999f;
        c[l] = 1e-6f * (float)(l + 1);
    }
    for (int k = 0; k < CHAINS; k++) a[k] = c * (float)(k + 1);
    for (long i = 0; i < iters; i++) {
        /* a fixed, unrolled body: the compiler keeps every chain in a register */
        a[0] = a[0] * b + c; a[1] = a[1] * b + c; a[2] = a[2] * b + c; a[3] = a[3] * b + c;
        a[4] = a[4] * b + c; a[5] = a[5] * b + c; a[6] = a[6] * b + c; a[7] = a[7] * b + c;
        a[8] = a[8] * b + c; a[9] = a[9] * b + c; a[10] = a[10] * b + c; a[11] = a[11] * b + c;
        a[12] = a[12] * b + c; a[13] = a[13] * b + c; a[14] = a[14] * b + c; a[15] = a[15] * b + c;
    }
    vf sum = a[0];
    for (int k = 1; k < CHAINS; k++) sum += a[k];
    *out = sum[0];
    /* FLOPs done: one multiply and one add per lane, chain and iteration */
    return (double)iters * CHAINS * (VEC_BYTES / 4) * 2.0;
}

long svod_clock_probe(long iters) {
#if defined(__x86_64__)
    long x = 0, y = iters | 1;
    for (long i = 0; i < iters; i++) {
        __asm__ volatile(
            "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
            "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
            "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
            "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
            : "+r"(x)
            : "r"(y));
    }
    return x == 1 ? 0 : iters * 16; /* the dependent adds done (x is never 1: y is odd, 16 y is even) */
#else
    (void)iters;
    return 0;
#endif
}
