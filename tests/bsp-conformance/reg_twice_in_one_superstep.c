/* expect: ok
 * Two registrations of one address in the same superstep: the later wins. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int a[8] = {0};
    bsp_push_reg(a, 2 * sizeof(int));
    bsp_push_reg(a, sizeof a);
    bsp_sync();
    bsp_put((s + 1) % p, &s, a, 7 * sizeof(int), sizeof s);
    bsp_sync();
    CHECK_INT(a[7], (s + p - 1) % p);
    pass();
    bsp_end();
    return 0;
}
