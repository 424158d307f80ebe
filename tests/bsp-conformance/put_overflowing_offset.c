/* expect: abort "bsp_put" "outside"
 * An offset near INT_MAX must not wrap around when nbytes is added. */
#include "check.h"
#include <limits.h>

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x[2] = {0, 0};
    bsp_push_reg(x, sizeof x);
    bsp_sync();
    bsp_put(0, x, x, INT_MAX - 2, sizeof(int));
    bsp_sync();
    bsp_end();
    return 0;
}
