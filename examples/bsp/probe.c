/* expect: ok
 * output: "g ="
 * args: 64 3
 *
 * Measures the BSP parameters g and l of this machine and network, the way
 * Bisseling's bspbench does: time h-relations for growing h and fit
 * T(h) = l + g h by least squares.
 *
 *   bspcc -O2 -o probe probe.c && bsprun -npes 4 ./probe [hmax] [reps]
 *
 * In an h-relation every process sends h words and receives h words; here
 * word i of process s goes to process (s + 1 + i % (p - 1)) % p, so the
 * words are spread over all other processes. g is printed in microseconds
 * per 8-byte word and l in microseconds; each superstep's data is checked.
 */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int hmax = argc > 1 ? atoi(argv[1]) : 256;
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    if (hmax < 1 || reps < 1)
        bsp_abort("probe: hmax and reps must be at least 1\n");

    double *src = malloc((size_t)hmax * sizeof(double));
    double *dst = calloc((size_t)hmax, sizeof(double));
    double *times = calloc((size_t)(hmax + 1), sizeof(double));
    bsp_push_reg(dst, hmax * (int)sizeof(double));
    bsp_sync();

    for (int h = 0; h <= hmax; h++) {
        for (int i = 0; i < h; i++)
            src[i] = s * 1e6 + h * 1e3 + i;
        bsp_sync();
        double t0 = bsp_time();
        for (int r = 0; r < reps; r++) {
            /* Word i lands in slot i of its destination. For a given i
             * exactly one sender targets each process, so every process
             * receives h words, one per slot. */
            for (int i = 0; i < h; i++) {
                int to = p == 1 ? 0 : (s + 1 + i % (p - 1)) % p;
                bsp_put(to, &src[i], dst, i * (int)sizeof(double), sizeof(double));
            }
            bsp_sync();
        }
        times[h] = (bsp_time() - t0) / reps;
        /* Slot i came from the process whose word i was sent here. */
        for (int i = 0; i < h; i++) {
            int from = p == 1 ? 0 : ((s - 1 - i % (p - 1)) % p + p) % p;
            if (dst[i] != from * 1e6 + h * 1e3 + i)
                bsp_abort("probe: process %d, h %d: slot %d holds %.0f\n", s, h, i, dst[i]);
        }
    }

    /* Every process fits its own times; process 0 reports its fit. */
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int m = hmax + 1;
    for (int h = 0; h <= hmax; h++) {
        sx += h;
        sy += times[h];
        sxx += (double)h * h;
        sxy += h * times[h];
    }
    double g = (m * sxy - sx * sy) / (m * sxx - sx * sx);
    double l = (sy - g * sx) / m;
    if (s == 0) {
        printf("h-relations on %d processes, %d repetitions each\n", p, reps);
        printf("%8s %14s\n", "h", "time (us)");
        for (int h = 0; h <= hmax; h = h == 0 ? 1 : 2 * h)
            printf("%8d %14.2f\n", h, times[h] * 1e6);
        printf("g = %.4f us per word, l = %.2f us\n", g * 1e6, l * 1e6);
        printf("ok\n");
    }
    bsp_pop_reg(dst);
    bsp_end();
    free(src);
    free(dst);
    free(times);
    return 0;
}
