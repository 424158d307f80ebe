/* expect: abort "bsp_put" "outside"
 * The most recent registration wins even when it is smaller: a put beyond
 * it is outside the registered area. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid();
    int a[4] = {0};
    bsp_push_reg(a, sizeof a);
    bsp_sync();
    bsp_push_reg(a, sizeof(int));
    bsp_sync();
    bsp_put(0, &s, a, 2 * sizeof(int), sizeof s);
    bsp_sync();
    bsp_end();
    return 0;
}
