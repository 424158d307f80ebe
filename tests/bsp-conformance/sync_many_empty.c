/* expect: ok
 * Five hundred empty supersteps. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    for (int i = 0; i < 500; i++)
        bsp_sync();
    pass();
    bsp_end();
    return 0;
}
