/* expect: abort "bsp_end"
 * procs: >=2
 * One process exits in the middle of the SPMD part while the others sync. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    if (bsp_pid() == 1)
        exit(0);
    bsp_sync();
    bsp_sync();
    bsp_end();
    return 0;
}
