/* expect: ok
 * Puts, gets and messages in the same superstep do not disturb each other. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), right = (s + 1) % p, left = (s + p - 1) % p;
    int x = value_of(s, 0), y = 0, got = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_push_reg(&y, sizeof y);
    bsp_sync();
    int v = value_of(s, 1), m = value_of(s, 2);
    bsp_put(right, &v, &y, 0, sizeof v);
    bsp_get(right, &x, 0, &got, sizeof got);
    bsp_send(left, NULL, &m, sizeof m);
    bsp_sync();
    CHECK_INT(y, value_of(left, 1));
    CHECK_INT(got, value_of(right, 0));
    int msg;
    bsp_move(&msg, sizeof msg);
    CHECK_INT(msg, value_of(right, 2));
    pass();
    bsp_end();
    return 0;
}
