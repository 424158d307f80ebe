/* expect: ok
 * output: "total exchange"
 *
 * A total exchange, timed: in every superstep each process puts `size`
 * bytes into every other process's area; after `reps` supersteps (and two to
 * warm up) process 0 prints the mean time of one. Every byte is checked.
 * Time it under the sync's settings (BULKWIRE_BSP_ORDER, BULKWIRE_BSP_RATE,
 * BULKWIRE_BSP_PACING) with BULKWIRE_BSP_STATS=1 for the packet counts:
 *
 *   bspcc -O2 -o exchange exchange.c && bsprun -npes 8 ./exchange [size] [reps] [check]
 *
 * With check 0 only the last superstep's bytes are checked (and the same
 * bytes go every time): where processes share cores, the checks take CPU
 * time that the others' syncs wait for.
 */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    long size = argc > 1 ? atol(argv[1]) : 16384, reps = argc > 2 ? atol(argv[2]) : 10;
    long check = argc > 3 ? atol(argv[3]) : 1;
    if (size < 1 || size > (1L << 26) || reps < 1 || (check != 0 && check != 1))
        bsp_abort("exchange: size must be 1 to 2^26 bytes, reps at least 1 and check 0 or 1, not %ld, %ld and %ld\n",
                  size, reps, check);

    char *in = calloc((size_t)p, (size_t)size), *out = malloc((size_t)size);
    if (!in || !out)
        bsp_abort("exchange: out of memory for %d x %ld bytes\n", p, size);
    bsp_push_reg(in, (int)(p * size));
    bsp_sync();

    double total = 0.0;
    for (long r = 0; r < reps + 2; r++) {
        /* Each superstep's bytes differ, so a stale area shows; unchecked
           supersteps send the last one's bytes. */
        long mark = check ? r : reps + 1;
        if (check || r == 0)
            memset(out, (int)((s + mark) % 251) + 1, (size_t)size);
        double t = bsp_time();
        for (int k = 1; k < p; k++)
            bsp_put((s + k) % p, out, in, (int)(s * size), (int)size);
        bsp_sync();
        if (r >= 2)
            total += bsp_time() - t;
        for (int q = 0; q < p && (check || r == reps + 1); q++) {
            char want = (char)((q + mark) % 251 + 1);
            for (long i = 0; i < size && q != s; i++)
                if (in[q * size + i] != want)
                    bsp_abort("exchange: byte %ld from process %d is wrong in superstep %ld\n", i, q, r);
        }
    }
    if (s == 0) {
        printf("total exchange: %d processes, %ld bytes per pair, mean %.1f us over %ld\n", p, size,
               total / (double)reps * 1e6, reps);
        printf("ok\n");
    }
    bsp_pop_reg(in);
    bsp_end();
    free(in);
    free(out);
    return 0;
}
