/* expect: abort "bsp_put" "registered"
 * After bsp_pop_reg and a sync, the address is no longer registered. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, s = bsp_pid();
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_pop_reg(&x);
    bsp_sync();
    bsp_put(0, &s, &x, 0, sizeof s);
    bsp_sync();
    bsp_end();
    return 0;
}
