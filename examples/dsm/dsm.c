/* expect: ok
 * output: "every value checked"
 *
 * Shared memory from C: every process writes its slot of a PRAM segment
 * many times and a coherent counter once, and reads the others' slots
 * while they write (PRAM values never go back); after a fence every
 * process holds every last value. Then misuses that come back as errors.
 * Prints "every value checked" on process 0.
 *
 *   bspcc -o dsm examples/dsm/dsm.c && bulkwire run -n 4 ./dsm
 */
#include <bsp.h>
#include <bulkwire.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                              \
    do {                                                                                      \
        if ((x) < 0) {                                                                        \
            fprintf(stderr, "%d: %s failed: %s\n", bsp_pid(), #x, bw_error());                \
            bsp_abort("dsm.c: a call failed\n");                                              \
        }                                                                                     \
    } while (0)
#define EXPECT(c)                                                                             \
    do {                                                                                      \
        if (!(c)) bsp_abort("dsm.c: %d: %s does not hold\n", bsp_pid(), #c);                  \
    } while (0)

#define ROUNDS 2000

int main(void) {
    bsp_begin(bsp_nprocs());
    int p = bsp_pid(), n = bsp_nprocs();
    int slots = bw_seg_map("slots", BW_INT64, (size_t)n);
    int halves = bw_seg_map("halves", BW_FLOAT, (size_t)n);
    int counter = bw_seg_map("counter", BW_INT32, 1);
    CHECK(slots);
    CHECK(halves);
    CHECK(counter);
    long long *seen = calloc((size_t)n, sizeof *seen);
    for (long long i = 1; i <= ROUNDS; i++) {
        CHECK(bw_seg_write(slots, (size_t)p, &i, 1, BW_PRAM));
        float h = (float)i / 2;
        CHECK(bw_seg_write(halves, (size_t)p, &h, 1, BW_SLOW));
        for (int q = 0; q < n; q++) {
            long long v;
            CHECK(bw_seg_read(slots, (size_t)q, &v, 1));
            EXPECT(v >= seen[q]);
            seen[q] = v;
        }
    }
    int mine = -(p + 1);
    CHECK(bw_seg_write(counter, 0, &mine, 1, BW_COHERENT));
    CHECK(bw_fence());
    long long *all = malloc((size_t)n * sizeof *all);
    float *hs = malloc((size_t)n * sizeof *hs);
    CHECK(bw_seg_read(slots, 0, all, (size_t)n));
    CHECK(bw_seg_read(halves, 0, hs, (size_t)n));
    for (int q = 0; q < n; q++) {
        EXPECT(all[q] == ROUNDS);
        EXPECT(hs[q] == (float)ROUNDS / 2);
    }
    int last;
    CHECK(bw_seg_read(counter, 0, &last, 1));
    EXPECT(last < 0 && last >= -n);
    /* Every process holds the same last coherent value. */
    int *lasts = calloc((size_t)n, sizeof *lasts);
    bsp_push_reg(lasts, n * (int)sizeof *lasts);
    bsp_sync();
    for (int q = 0; q < n; q++) bsp_put(q, &last, lasts, p * (int)sizeof last, sizeof last);
    bsp_sync();
    for (int q = 0; q < n; q++) EXPECT(lasts[q] == last);

    /* Misuses: errors, not crashes. */
    long long v = 1;
    EXPECT(bw_seg_write(slots, (size_t)n, &v, 1, BW_PRAM) == -1);
    EXPECT(strstr(bw_error(), "out of range") != NULL);
    EXPECT(bw_seg_read(99, 0, &v, 1) == -1);
    EXPECT(strstr(bw_error(), "no segment 99 is mapped") != NULL);
    EXPECT(bw_seg_write(slots, 0, &v, 1, (bw_semantics)7) == -1);
    EXPECT(strstr(bw_error(), "not a bw_semantics") != NULL);
    CHECK(bw_fence());
    if (p == 0) printf("dsm.c: every value checked on %d processes\nok\n", n);
    free(seen);
    free(all);
    free(hs);
    bsp_pop_reg(lasts);
    bsp_end();
    free(lasts);
    return 0;
}
