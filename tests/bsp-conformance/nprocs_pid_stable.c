/* expect: ok
 * bsp_nprocs and bsp_pid do not change across supersteps. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    for (int i = 0; i < 20; i++) {
        bsp_sync();
        CHECK_INT(bsp_nprocs(), p);
        CHECK_INT(bsp_pid(), s);
    }
    pass();
    bsp_end();
    return 0;
}
