/* expect: ok
 * bsp_begin(1) runs the SPMD part on one process; the others leave quietly. */
#include "check.h"

int main(void)
{
    bsp_begin(1);
    CHECK_INT(bsp_nprocs(), 1);
    CHECK_INT(bsp_pid(), 0);
    bsp_sync();
    pass();
    bsp_end();
    return 0;
}
