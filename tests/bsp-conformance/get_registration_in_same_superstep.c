/* expect: abort "bsp_get" "registered"
 * A get from an area registered in the same superstep is too early. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, got = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_get(0, &x, 0, &got, sizeof got);
    bsp_sync();
    bsp_end();
    return 0;
}
