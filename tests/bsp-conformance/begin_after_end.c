/* expect: abort "bsp_begin" "already"
 * The SPMD part cannot be started again after bsp_end. */
#include "check.h"

int main(void)
{
    bsp_begin(1);
    bsp_end();
    bsp_begin(1);
    bsp_end();
    return 0;
}
