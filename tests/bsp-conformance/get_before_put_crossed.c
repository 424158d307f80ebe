/* expect: ok
 * Gets come before puts across processes too: each process reads its left
 * neighbour's variable while that neighbour's own left neighbour overwrites
 * it in the same superstep; the read sees the old value. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int x = value_of(s, 0), got = -1;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    /* Everyone writes into its right neighbour and reads its left one. */
    int v = value_of(s, 50);
    bsp_put((s + 1) % p, &v, &x, 0, sizeof v);
    bsp_get((s + p - 1) % p, &x, 0, &got, sizeof got);
    bsp_sync();
    CHECK_INT(got, value_of((s + p - 1) % p, 0));
    CHECK_INT(x, value_of((s + p - 1) % p, 50));
    pass();
    bsp_end();
    return 0;
}
