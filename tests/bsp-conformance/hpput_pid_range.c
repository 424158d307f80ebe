/* expect: abort "bsp_hpput" "does not exist"
 * bsp_hpput checks its destination like bsp_put. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_hpput(bsp_nprocs(), &x, &x, 0, sizeof x);
    bsp_sync();
    bsp_end();
    return 0;
}
