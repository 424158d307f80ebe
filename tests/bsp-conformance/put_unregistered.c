/* expect: abort "bsp_put" "registered"
 * A put into an address that was never registered. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, y = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put(0, &x, &y, 0, sizeof x);
    bsp_sync();
    bsp_end();
    return 0;
}
