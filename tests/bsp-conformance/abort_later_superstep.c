/* expect: abort "superstep 5 of process 0"
 * bsp_abort in a later superstep, after communication went well. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, s = bsp_pid();
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    for (int step = 1; step < 10; step++) {
        bsp_put((s + 1) % bsp_nprocs(), &step, &x, 0, sizeof step);
        bsp_sync();
        CHECK_INT(x, step);
        if (step == 5 && s == 0)
            bsp_abort("superstep %d of process %d", step, s);
    }
    bsp_end();
    return 0;
}
