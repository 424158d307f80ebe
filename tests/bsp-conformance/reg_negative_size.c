/* expect: abort "bsp_push_reg" "negative"
 * A registration of negative size is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, -8);
    bsp_sync();
    bsp_end();
    return 0;
}
