/* expect: abort "bsp_end" "superstep"
 * procs: >=2
 * Process 0 syncs once more than the others: the others reach bsp_end in a
 * different superstep, which ends the job instead of hanging it. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    bsp_sync();
    if (bsp_pid() == 0)
        bsp_sync();
    bsp_end();
    return 0;
}
