/* expect: ok
 * bsp_hpmove on an empty queue returns -1. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    void *tp, *pp;
    CHECK_INT(bsp_hpmove(&tp, &pp), -1);
    pass();
    bsp_end();
    return 0;
}
