/* expect: abort "bsp_hpmove" "null"
 * bsp_hpmove needs both pointers. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    void *tp;
    bsp_hpmove(&tp, NULL);
    bsp_end();
    return 0;
}
