/* expect: abort "bsp_get" "outside"
 * A get beyond the registered size is outside the area. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, got[2] = {0, 0};
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_get(0, &x, 0, got, sizeof got);
    bsp_sync();
    bsp_end();
    return 0;
}
