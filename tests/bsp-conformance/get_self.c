/* expect: ok
 * A process may get from its own registered memory. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), a[3] = {value_of(s, 0), value_of(s, 1), value_of(s, 2)}, got = 0;
    bsp_push_reg(a, sizeof a);
    bsp_sync();
    bsp_get(s, a, 2 * sizeof(int), &got, sizeof got);
    bsp_sync();
    CHECK_INT(got, value_of(s, 2));
    pass();
    bsp_end();
    return 0;
}
