/* expect: ok
 * output: "available {P}"
 * bsp_nprocs before bsp_begin gives the number of processes available. */
#include "check.h"

int main(void)
{
    int available = bsp_nprocs();
    CHECK(available >= 1);
    bsp_begin(available);
    if (bsp_pid() == 0)
        printf("available %d\n", available);
    CHECK_INT(bsp_nprocs(), available);
    pass();
    bsp_end();
    return 0;
}
