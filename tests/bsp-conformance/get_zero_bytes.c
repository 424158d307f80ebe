/* expect: ok
 * A get of zero bytes is allowed and writes nothing. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), x = 5, got = 11;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_get((s + 1) % bsp_nprocs(), &x, 0, &got, 0);
    bsp_sync();
    CHECK_INT(got, 11);
    pass();
    bsp_end();
    return 0;
}
