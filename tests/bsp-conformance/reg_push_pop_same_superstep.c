/* expect: ok
 * Pushes and pops take effect at the next sync in the order they were made,
 * so a registration may be popped in the superstep that pushed it: it is
 * never in effect, the other registrations are, and where an older
 * registration of the address exists it stays in effect. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), right = (s + 1) % p, left = (s + p - 1) % p;
    int x[4] = {0, 0, 0, 0}, y = -1;
    /* Superstep 0: x and y pushed, x popped again. */
    bsp_push_reg(x, sizeof x);
    bsp_push_reg(&y, sizeof y);
    bsp_pop_reg(x);
    bsp_sync();
    bsp_put(right, &s, &y, 0, sizeof s);
    bsp_sync();
    CHECK_INT(y, left);
    /* Superstep 2: x registered with one int; then, in one superstep, again
     * with four and popped: the one-int registration stays. */
    bsp_push_reg(x, sizeof(int));
    bsp_sync();
    bsp_push_reg(x, sizeof x);
    bsp_pop_reg(x);
    bsp_sync();
    bsp_put(right, &s, x, 0, sizeof s);
    bsp_sync();
    CHECK_INT(x[0], left);
    /* Popping x now removes the one-int registration, the last one. */
    bsp_pop_reg(x);
    bsp_pop_reg(&y);
    bsp_sync();
    pass();
    bsp_end();
    return 0;
}
