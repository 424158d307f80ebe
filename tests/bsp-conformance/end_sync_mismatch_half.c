/* expect: abort "bsp_end" "superstep"
 * procs: >=2
 * Odd processes sync twice, even ones three times. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    bsp_sync();
    bsp_sync();
    if (bsp_pid() % 2 == 0)
        bsp_sync();
    bsp_end();
    return 0;
}
