/* expect: ok
 * bsp_put copies its source when called: changing the source afterwards,
 * in the same superstep, does not change what lands. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), x = -1;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    int v = value_of(s, 0);
    bsp_put((s + 1) % p, &v, &x, 0, sizeof v);
    v = -99;
    bsp_sync();
    CHECK_INT(x, value_of((s + p - 1) % p, 0));
    pass();
    bsp_end();
    return 0;
}
