/* expect: ok
 * A process may put into its own registered memory. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), x[2] = {0, 0};
    bsp_push_reg(x, sizeof x);
    bsp_sync();
    int v = value_of(s, 5);
    bsp_put(s, &v, x, sizeof(int), sizeof v);
    bsp_sync();
    CHECK_INT(x[0], 0);
    CHECK_INT(x[1], value_of(s, 5));
    pass();
    bsp_end();
    return 0;
}
