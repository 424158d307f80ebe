/* expect: ok
 * All gets of a superstep are served before any put lands: a get and a put
 * on the same variable in one superstep read the old value. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int x = value_of(s, 0), got = -1;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    int to = (s + 1) % p, v = -7;
    bsp_put(to, &v, &x, 0, sizeof v);
    bsp_get(to, &x, 0, &got, sizeof got);
    bsp_sync();
    CHECK_INT(got, value_of(to, 0));
    CHECK_INT(x, -7);
    pass();
    bsp_end();
    return 0;
}
