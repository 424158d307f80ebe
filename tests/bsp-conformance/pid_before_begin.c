/* expect: abort "bsp_pid" "bsp_begin"
 * A process has no pid before bsp_begin. */
#include "check.h"

int main(void)
{
    printf("%d\n", bsp_pid());
    return 0;
}
