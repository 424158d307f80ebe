/* expect: abort "bsp_push_reg" "null"
 * Registering NULL is for processes with nothing to register, so its size
 * must be 0: with a size, puts into it would write near address 0. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    bsp_push_reg(NULL, 64);
    bsp_sync();
    bsp_end();
    return 0;
}
