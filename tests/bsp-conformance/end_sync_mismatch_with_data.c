/* expect: abort "bsp_end" "superstep"
 * procs: >=2
 * The last process skips the sync that would deliver a put to it. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, s = bsp_pid(), p = bsp_nprocs();
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    if (s != p - 1) {
        bsp_put(p - 1, &s, &x, 0, sizeof s);
        bsp_sync();
    }
    bsp_end();
    return 0;
}
