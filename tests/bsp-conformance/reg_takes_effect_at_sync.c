/* expect: abort "bsp_put" "registered"
 * A registration takes effect at the next sync: a put to it in the same
 * superstep names an unregistered area. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, s = bsp_pid();
    bsp_push_reg(&x, sizeof x);
    bsp_put(0, &s, &x, 0, sizeof s);
    bsp_sync();
    bsp_end();
    return 0;
}
