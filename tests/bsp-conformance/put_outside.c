/* expect: abort "bsp_put" "outside"
 * offset + nbytes beyond the registered size is outside the area. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x[2] = {0, 0};
    bsp_push_reg(x, sizeof x);
    bsp_sync();
    bsp_put(0, x, x, sizeof(int), sizeof x);
    bsp_sync();
    bsp_end();
    return 0;
}
