/* expect: abort "bsp_get" "negative"
 * A negative offset is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, got = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_get(0, &x, -4, &got, sizeof got);
    bsp_sync();
    bsp_end();
    return 0;
}
