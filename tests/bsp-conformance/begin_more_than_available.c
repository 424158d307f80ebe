/* expect: ok
 * bsp_begin asks for at most maxprocs processes: asking for more than are
 * available gives those available. */
#include "check.h"

int main(void)
{
    int available = bsp_nprocs();
    bsp_begin(available + 3);
    CHECK_INT(bsp_nprocs(), available);
    pass();
    bsp_end();
    return 0;
}
