/* expect: abort "stopping at step 42"
 * bsp_abort from one process ends every process, with its message, while
 * the others wait in bsp_sync. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    if (bsp_pid() == bsp_nprocs() - 1)
        bsp_abort("stopping at step %d\n", 42);
    bsp_sync();
    bsp_sync();
    bsp_end();
    return 0;
}
