/* test.h -- the smallest test framework that does the job: named checks, a pass/fail count,
 * and the closing line "N passed, M failed" that CI reads. NaN never passes: every numeric
 * check is written so that a NaN compares false. */
#ifndef LONGCTX_TEST_H
#define LONGCTX_TEST_H

#include <math.h>
#include <stdio.h>

static int test_passed, test_failed;

#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (cond) test_passed++;                                            \
        else {                                                              \
            test_failed++;                                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                     \
            printf(__VA_ARGS__);                                            \
            printf("\n");                                                   \
        }                                                                   \
    } while (0)

/* value <= limit, NaN-safe (a NaN value fails) */
#define EXPECT_LE(value, limit, ...) EXPECT((value) <= (limit), __VA_ARGS__)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

/* ||a - b|| / ||b|| in fp64; NaN if anything is non-finite */
static inline double rel_err(const float *a, const float *b, long long n) {
    double num = 0, den = 0;
    for (long long i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return NAN;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif
