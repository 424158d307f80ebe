/* expect: abort "everyone stops"
 * Every process calls bsp_abort in the same superstep. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    bsp_abort("everyone stops (%s)\n", "together");
    bsp_end();
    return 0;
}
