/* expect: abort "bsp_hpget" "outside"
 * bsp_hpget checks the registered size like bsp_get. The destination finds
 * the access outside its area when it applies it at the sync, and names
 * the call: the record says it was bsp_hpget. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, got[4];
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_hpget(0, &x, 0, got, sizeof got);
    bsp_sync();
    bsp_end();
    return 0;
}
