/* expect: ok
 * Registering an address again with a larger size: the most recent
 * registration wins, so a put beyond the first size is allowed. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int a[4] = {0, 0, 0, 0};
    bsp_push_reg(a, sizeof(int));
    bsp_sync();
    bsp_push_reg(a, sizeof a);
    bsp_sync();
    bsp_put((s + 1) % p, &s, a, 3 * sizeof(int), sizeof s);
    bsp_sync();
    CHECK_INT(a[3], (s + p - 1) % p);
    pass();
    bsp_end();
    return 0;
}
