/* expect: ok
 * A 1-D heat stencil with halo exchange by puts, compared with the same
 * computation done sequentially on every process. */
#include "check.h"

#define B 8
#define STEPS 20

static double initial(int g)
{
    return (double)((g * 37) % 11);
}

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), n = p * B;
    double u[B + 2], next[B + 2];
    for (int i = 0; i < B; i++)
        u[i + 1] = initial(s * B + i);
    bsp_push_reg(u, sizeof u);
    bsp_sync();
    for (int t = 0; t < STEPS; t++) {
        /* Ends of the whole rod are fixed at 0: halo cells stay 0 there. */
        u[0] = 0.0;
        u[B + 1] = 0.0;
        if (s > 0)
            bsp_put(s - 1, &u[1], u, (B + 1) * (int)sizeof(double), sizeof(double));
        if (s < p - 1)
            bsp_put(s + 1, &u[B], u, 0, sizeof(double));
        bsp_sync();
        for (int i = 1; i <= B; i++)
            next[i] = u[i] + 0.25 * (u[i - 1] - 2 * u[i] + u[i + 1]);
        memcpy(u + 1, next + 1, B * sizeof(double));
    }
    double *all = malloc((size_t)(n + 2) * sizeof(double)), *tmp = malloc((size_t)(n + 2) * sizeof(double));
    all[0] = all[n + 1] = tmp[0] = tmp[n + 1] = 0.0;
    for (int g = 0; g < n; g++)
        all[g + 1] = initial(g);
    for (int t = 0; t < STEPS; t++) {
        for (int g = 1; g <= n; g++)
            tmp[g] = all[g] + 0.25 * (all[g - 1] - 2 * all[g] + all[g + 1]);
        memcpy(all + 1, tmp + 1, (size_t)n * sizeof(double));
    }
    for (int i = 0; i < B; i++)
        CHECK(u[i + 1] == all[s * B + i + 1]);
    pass();
    bsp_end();
    free(all);
    free(tmp);
    return 0;
}
