/* expect: abort "bsp_put" "does not exist"
 * The destination pid must be below bsp_nprocs(). */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put(bsp_nprocs(), &x, &x, 0, sizeof x);
    bsp_sync();
    bsp_end();
    return 0;
}
