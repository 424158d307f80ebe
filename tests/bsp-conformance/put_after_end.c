/* expect: abort "bsp_put" "bsp_end"
 * Communication after bsp_end (on process 0, the one that goes on) is a misuse. */
#include "check.h"

int main(void)
{
    int x = 0;
    bsp_begin(bsp_nprocs());
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_end();
    bsp_put(0, &x, &x, 0, sizeof x);
    return 0;
}
