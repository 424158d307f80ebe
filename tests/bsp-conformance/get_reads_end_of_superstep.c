/* expect: ok
 * A get reads the remote value at the end of the superstep's computation:
 * a change the owner makes after the get was issued is what arrives. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int x = value_of(s, 0), got = -1;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_get((s + 1) % p, &x, 0, &got, sizeof got);
    x = value_of(s, 9); /* after our own get was issued, before the sync */
    bsp_sync();
    CHECK_INT(got, value_of((s + 1) % p, 9));
    pass();
    bsp_end();
    return 0;
}
