/* expect: abort "bsp_put" "does not exist"
 * Only the last process misuses bsp_put; the others, waiting in bsp_sync,
 * are stopped too. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    if (bsp_pid() == bsp_nprocs() - 1)
        bsp_put(bsp_nprocs() + 5, &x, &x, 0, sizeof x);
    bsp_sync();
    bsp_end();
    return 0;
}
