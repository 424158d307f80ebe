/* expect: abort "bsp_hpget" "does not exist"
 * bsp_hpget rejects a negative pid. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, got = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_hpget(-3, &x, 0, &got, sizeof got);
    bsp_sync();
    bsp_end();
    return 0;
}
