/* expect: ok
 * bsp_begin(k) with k below the number available runs exactly k processes,
 * which communicate as usual. */
#include "check.h"

int main(void)
{
    int k = (bsp_nprocs() + 1) / 2;
    bsp_begin(k);
    CHECK_INT(bsp_nprocs(), k);
    int x = -1, s = bsp_pid();
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put((s + 1) % k, &s, &x, 0, sizeof s);
    bsp_sync();
    CHECK_INT(x, (s + k - 1) % k);
    pass();
    bsp_end();
    return 0;
}
