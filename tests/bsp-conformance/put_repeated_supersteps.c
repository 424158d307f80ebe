/* expect: ok
 * A value travels around the ring, one hop per superstep. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int token = s, incoming = -1;
    bsp_push_reg(&incoming, sizeof incoming);
    bsp_sync();
    for (int step = 0; step < 3 * p; step++) {
        bsp_put((s + 1) % p, &token, &incoming, 0, sizeof token);
        bsp_sync();
        token = incoming;
    }
    /* After 3p hops every token is back home. */
    CHECK_INT(token, s);
    pass();
    bsp_end();
    return 0;
}
