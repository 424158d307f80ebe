/* expect: ok
 * bsp_get reads the right neighbour's registered value. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int x = value_of(s, 0), got = -1;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_get((s + 1) % p, &x, 0, &got, sizeof got);
    bsp_sync();
    CHECK_INT(got, value_of((s + 1) % p, 0));
    pass();
    bsp_end();
    return 0;
}
