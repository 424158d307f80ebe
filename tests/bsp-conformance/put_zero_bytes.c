/* expect: ok
 * A put of zero bytes is allowed and changes nothing. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), x = 17;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put((s + 1) % p, &s, &x, 0, 0);
    bsp_put((s + 1) % p, &s, &x, sizeof x, 0);
    bsp_sync();
    CHECK_INT(x, 17);
    pass();
    bsp_end();
    return 0;
}
