/* expect: abort "bsp_put" "outside"
 * procs: >=2
 * A process that registered NULL with size 0 has no room: a put of some
 * bytes into its part of the registration is outside it. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), x[2] = {0, 0};
    if (s == 1)
        bsp_push_reg(NULL, 0);
    else
        bsp_push_reg(x, sizeof x);
    bsp_sync();
    if (s == 0)
        bsp_put(1, &s, x, 0, sizeof s);
    bsp_sync();
    bsp_end();
    return 0;
}
