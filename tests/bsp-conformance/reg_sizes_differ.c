/* expect: ok
 * Sizes of one registration may differ between processes; a put is
 * checked against the size registered at its destination. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int n = s + 1; /* process s holds s + 1 ints */
    int *a = calloc((size_t)n, sizeof(int));
    bsp_push_reg(a, n * (int)sizeof(int));
    bsp_sync();
    int to = (s + 1) % p, last = to; /* the last int of the destination */
    int v = value_of(s, 1);
    bsp_put(to, &v, a, last * (int)sizeof(int), sizeof v);
    bsp_sync();
    CHECK_INT(a[s], value_of((s + p - 1) % p, 1));
    pass();
    bsp_end();
    free(a);
    return 0;
}
