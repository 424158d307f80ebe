/* expect: abort "bsp_get" "does not exist"
 * The source pid must be below bsp_nprocs(). */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, got = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_get(bsp_nprocs(), &x, 0, &got, sizeof got);
    bsp_sync();
    bsp_end();
    return 0;
}
