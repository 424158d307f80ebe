/* expect: abort "regist" "differ"
 * procs: >=2
 * One process pops while the others push: the collective sequences differ. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, y = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    if (bsp_pid() == 0)
        bsp_pop_reg(&x);
    else
        bsp_push_reg(&y, sizeof y);
    bsp_sync();
    bsp_sync();
    bsp_end();
    return 0;
}
