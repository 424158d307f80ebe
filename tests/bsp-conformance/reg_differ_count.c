/* expect: abort "regist" "differ"
 * procs: >=2
 * Registration is collective: process 0 registering one more area than the
 * others is detected at the sync. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, y = 0;
    bsp_push_reg(&x, sizeof x);
    if (bsp_pid() == 0)
        bsp_push_reg(&y, sizeof y);
    bsp_sync();
    bsp_sync();
    bsp_end();
    return 0;
}
