/* expect: ok
 * output: "inner product"
 *
 * Inner product of two distributed vectors (Bisseling's first BSP example).
 *
 *   bspcc -O2 -o inprod inprod.c && bsprun -npes 4 ./inprod [n]
 *
 * x and y of length n are distributed cyclically: process s holds the
 * elements i with i % p == s. Each process sums its part, puts the partial
 * sum into every process's table of partial sums, and after one sync every
 * process adds the table up: one superstep, an h-relation of p - 1.
 */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    long n = argc > 1 ? atol(argv[1]) : 100000;
    if (n < 1)
        bsp_abort("inprod: n must be at least 1, not %ld\n", n);

    /* x_i = i and y_i = i: the product is the sum of squares, known in
     * closed form. Partial sums add up in another order than a sequential
     * loop, so large n are compared with a relative tolerance. */
    double local = 0.0;
    for (long i = s; i < n; i += p) {
        double x = (double)i, y = (double)i;
        local += x * y;
    }

    double *partial = calloc((size_t)p, sizeof(double));
    bsp_push_reg(partial, p * (int)sizeof(double));
    bsp_sync();
    for (int to = 0; to < p; to++)
        bsp_put(to, &local, partial, s * (int)sizeof(double), sizeof local);
    bsp_sync();
    double total = 0.0;
    for (int i = 0; i < p; i++)
        total += partial[i];
    bsp_pop_reg(partial);

    double expected = (double)(n - 1) * (double)n * (double)(2 * n - 1) / 6.0;
    double error = total > expected ? total - expected : expected - total;
    if (error > 1e-9 * expected)
        bsp_abort("inprod: process %d got %.0f, expected %.0f\n", s, total, expected);
    if (s == 0) {
        printf("inner product of length %ld on %d processes: %.17g (correct)\n", n, p, total);
        printf("ok\n");
    }
    bsp_end();
    free(partial);
    return 0;
}
