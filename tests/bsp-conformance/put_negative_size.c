/* expect: abort "bsp_put" "negative"
 * A negative number of bytes is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put(0, &x, &x, 0, -4);
    bsp_sync();
    bsp_end();
    return 0;
}
