/* expect: abort "bsp_put" "registered"
 * A put names the registered address itself, with an offset; a pointer
 * into the middle of a registered area is not a registered address. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), a[4] = {0};
    bsp_push_reg(a, sizeof a);
    bsp_sync();
    bsp_put(0, &s, &a[1], 0, sizeof s);
    bsp_sync();
    bsp_end();
    return 0;
}
