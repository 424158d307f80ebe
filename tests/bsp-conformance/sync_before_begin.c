/* expect: abort "bsp_sync" "bsp_begin"
 * Communication calls need the SPMD part to have begun. */
#include "check.h"

int main(void)
{
    bsp_sync();
    return 0;
}
