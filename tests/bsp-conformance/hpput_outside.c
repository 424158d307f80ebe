/* expect: abort "bsp_hpput" "outside"
 * bsp_hpput checks the registered size like bsp_put. The destination finds
 * the access outside its area when it applies it at the sync, and names
 * the call: the record says it was bsp_hpput. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, big[4] = {0};
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_hpput(0, big, &x, 0, sizeof big);
    bsp_sync();
    bsp_end();
    return 0;
}
