/* expect: ok
 * output: "LU of"
 *
 * LU decomposition, A = L U, of a dense n x n matrix distributed by rows.
 *
 *   bspcc -O2 -o lu lu.c -lm && bsprun -npes 4 ./lu [n]
 *
 * Row i belongs to process i % p (cyclic rows, so the work stays balanced
 * as the active part shrinks). In stage k the owner of row k puts the
 * pivot row into every process; after the sync each process eliminates
 * column k from its rows below k. The matrix is strictly diagonally
 * dominant, so no pivoting is needed and every pivot stays large. At the
 * end every process gathers U with puts and checks its rows of L U against
 * the rows of A it started with.
 */
#include <bsp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double entry(int i, int j, int n)
{
    /* Off-diagonal entries in [-1, 1], the diagonal above n: dominant. */
    if (i == j)
        return n + 1.0 + (i % 3);
    return ((i * 31 + j * 17) % 21 - 10) / 10.0;
}

int main(int argc, char **argv)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int n = argc > 1 ? atoi(argv[1]) : 48;
    if (n < 1)
        bsp_abort("lu: n must be at least 1\n");

    int rows = 0; /* local rows: i = s, s + p, ... */
    for (int i = s; i < n; i += p)
        rows++;
    double *a = malloc((size_t)(rows > 0 ? rows : 1) * n * sizeof(double));
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < n; j++)
            a[r * n + j] = entry(s + r * p, j, n);

    /* Every stage's pivot row lands here; all of U at the end. */
    double *pivot = malloc((size_t)n * sizeof(double));
    double *u = malloc((size_t)n * n * sizeof(double));
    bsp_push_reg(pivot, n * (int)sizeof(double));
    bsp_push_reg(u, n * n * (int)sizeof(double));
    bsp_sync();

    for (int k = 0; k < n; k++) {
        if (k % p == s)
            for (int to = 0; to < p; to++)
                bsp_put(to, &a[(k / p) * n], pivot, 0, n * (int)sizeof(double));
        bsp_sync();
        for (int r = 0; r < rows; r++) {
            int i = s + r * p;
            if (i <= k)
                continue;
            double l = a[r * n + k] / pivot[k];
            a[r * n + k] = l; /* L below the diagonal, U on and above it */
            for (int j = k + 1; j < n; j++)
                a[r * n + j] -= l * pivot[j];
        }
    }

    /* Gather U: row i of U is the upper part of local row i. */
    for (int r = 0; r < rows; r++) {
        int i = s + r * p;
        for (int to = 0; to < p; to++)
            bsp_put(to, &a[r * n], u, i * n * (int)sizeof(double), n * (int)sizeof(double));
    }
    bsp_sync();

    double worst = 0.0;
    for (int r = 0; r < rows; r++) {
        int i = s + r * p;
        for (int j = 0; j < n; j++) {
            /* (L U)_ij = sum over k <= min(i, j) of L_ik U_kj, with L_ii = 1. */
            double sum = 0.0;
            for (int k = 0; k <= i && k <= j; k++) {
                double l = k == i ? 1.0 : a[r * n + k];
                sum += l * u[k * n + j];
            }
            double err = fabs(sum - entry(i, j, n));
            if (err > worst)
                worst = err;
        }
    }
    if (worst > 1e-9 * n)
        bsp_abort("lu: process %d: |LU - A| reaches %g\n", s, worst);
    if (s == 0) {
        printf("LU of a %d x %d matrix on %d processes: max |LU - A| on process 0 = %.2e\n", n, n, p, worst);
        printf("ok\n");
    }
    bsp_pop_reg(u);
    bsp_pop_reg(pivot);
    bsp_end();
    free(a);
    free(pivot);
    free(u);
    return 0;
}
