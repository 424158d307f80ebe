/* expect: ok
 * An SPMD part with no superstep boundary at all. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    CHECK(bsp_pid() < bsp_nprocs());
    pass();
    bsp_end();
    return 0;
}
