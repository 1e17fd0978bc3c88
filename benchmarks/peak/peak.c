/* Peak fp32 FMA throughput and STREAM-like triad bandwidth of this machine.
 *
 *   gcc -O3 -march=native -fopenmp peak.c -o peak && OMP_NUM_THREADS=2 ./peak
 *
 * FMA: each thread runs CHAINS independent vector FMA chains (enough to cover
 * the FMA latency on every pipe), so the loop is throughput-bound. The widest
 * vector ISA the compiler was told about is used (AVX-512, else AVX2+FMA).
 * Triad: a[i] = b[i] + s * c[i] over arrays far larger than the last-level
 * cache; bytes counted as in STREAM (3 arrays x 4 bytes, no write-allocate).
 * Every figure is the best of several repeats. Output: one "key value" per line.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define ISA "avx512"
#define VSET1 _mm512_set1_ps
#define VFMA _mm512_fmadd_ps
#define VADD _mm512_add_ps
#define VSTORE _mm512_storeu_ps
#elif defined(__FMA__)
typedef __m256 vec;
#define LANES 8
#define ISA "avx2-fma"
#define VSET1 _mm256_set1_ps
#define VFMA _mm256_fmadd_ps
#define VADD _mm256_add_ps
#define VSTORE _mm256_storeu_ps
#else
#error "needs FMA (compile with -march=native on an x86 CPU with FMA)"
#endif

#define CHAINS 12

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* iters x CHAINS FMAs of LANES lanes; returns a value so nothing is optimised away */
static float fma_kernel(long iters, float seed) {
    vec a = VSET1(0.999999f), b = VSET1(1e-7f * seed);
    vec c[CHAINS];
    for (int i = 0; i < CHAINS; i++) c[i] = VSET1(seed + i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) c[i] = VFMA(c[i], a, b);
    }
    vec s = c[0];
    for (int i = 1; i < CHAINS; i++) s = VADD(s, c[i]);
    float out[LANES];
    VSTORE(out, s);
    return out[0];
}

static double fma_gflops(int threads, long iters, int repeats) {
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        sink += fma_kernel(iters, 1.0f + omp_get_thread_num());
        double dt = now() - t0;
        double g = 2.0 * LANES * CHAINS * (double)iters * threads / dt / 1e9;
        if (g > best) best = g;
    }
    return best;
}

static double triad_gbs(int threads, long n, int repeats) {
    float *a = aligned_alloc(64, n * sizeof(float)), *b = aligned_alloc(64, n * sizeof(float)),
          *c = aligned_alloc(64, n * sizeof(float));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; i++) { a[i] = 0; b[i] = 1.0f; c[i] = 2.0f; }
    double best = 0;
    for (int r = 0; r < repeats; r++) {
        float s = 3.0f + r;
        double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        double dt = now() - t0;
        double g = 3.0 * sizeof(float) * n / dt / 1e9;
        if (g > best) best = g;
    }
    volatile float keep = a[n / 2];
    (void)keep;
    free(a); free(b); free(c);
    return best;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
    long iters = argc > 2 ? atol(argv[2]) : 100000000L;
    long n = argc > 3 ? atol(argv[3]) : (1L << 25);  /* 128 MiB per array */
    printf("isa %s\n", ISA);
    printf("lanes %d\n", LANES);
    printf("threads %d\n", threads);
    printf("fma_gflops_1thread %.3f\n", fma_gflops(1, iters, 5));
    printf("fma_gflops_all %.3f\n", fma_gflops(threads, iters, 5));
    printf("triad_gbs_1thread %.3f\n", triad_gbs(1, n, 8));
    printf("triad_gbs_all %.3f\n", triad_gbs(threads, n, 8));
    return 0;
}
