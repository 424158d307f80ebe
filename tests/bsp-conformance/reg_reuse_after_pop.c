/* expect: ok
 * An address popped and registered again works again. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), x = 0;
    for (int round = 1; round <= 5; round++) {
        bsp_push_reg(&x, sizeof x);
        bsp_sync();
        int v = round * 1000 + s;
        bsp_put((s + 1) % p, &v, &x, 0, sizeof v);
        bsp_sync();
        CHECK_INT(x, round * 1000 + (s + p - 1) % p);
        bsp_pop_reg(&x);
    }
    bsp_sync();
    pass();
    bsp_end();
    return 0;
}
