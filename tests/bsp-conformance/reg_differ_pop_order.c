/* expect: abort "regist" "differ"
 * procs: >=2
 * Pops must name the same registrations everywhere: process 0 pops the
 * second area while the others pop the first. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    double y = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_push_reg(&y, sizeof y);
    bsp_sync();
    if (bsp_pid() == 0)
        bsp_pop_reg(&y);
    else
        bsp_pop_reg(&x);
    bsp_sync();
    bsp_sync();
    bsp_end();
    return 0;
}
