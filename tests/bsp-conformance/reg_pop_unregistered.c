/* expect: abort "bsp_pop_reg" "registered"
 * Popping an address that was never registered is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_pop_reg(&x);
    bsp_sync();
    bsp_end();
    return 0;
}
