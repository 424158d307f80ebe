/* expect: abort "bsp_get" "negative"
 * A negative number of bytes is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, got = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_get(0, &x, 0, &got, -1);
    bsp_sync();
    bsp_end();
    return 0;
}
