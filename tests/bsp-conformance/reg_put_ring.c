/* expect: ok
 * The basic pattern: register, sync, put to the right neighbour, sync. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), x = -1;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put((s + 1) % p, &s, &x, 0, sizeof s);
    bsp_sync();
    CHECK_INT(x, (s + p - 1) % p);
    pass();
    bsp_end();
    return 0;
}
