/* expect: abort "bsp_hpput" "negative"
 * bsp_hpput rejects negative sizes. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_hpput(0, &x, &x, 0, -1);
    bsp_sync();
    bsp_end();
    return 0;
}
