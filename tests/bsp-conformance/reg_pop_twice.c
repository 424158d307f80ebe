/* expect: abort "bsp_pop_reg" "registered"
 * One registration can be popped once. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_pop_reg(&x);
    bsp_sync();
    bsp_pop_reg(&x);
    bsp_sync();
    bsp_end();
    return 0;
}
