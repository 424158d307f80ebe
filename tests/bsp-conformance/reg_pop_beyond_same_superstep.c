/* expect: abort "bsp_put" "not registered"
 * procs: >=2
 * A registration pushed and popped in one superstep is never in effect: a
 * put into it in the next superstep is an error. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, s = bsp_pid();
    bsp_push_reg(&x, sizeof x);
    bsp_pop_reg(&x);
    bsp_sync();
    bsp_put((s + 1) % bsp_nprocs(), &s, &x, 0, sizeof s);
    bsp_sync();
    bsp_end();
    return 0;
}
