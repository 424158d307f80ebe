/* expect: abort "bsp_begin" "-4"
 * A negative number of processes is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(-4);
    bsp_end();
    return 0;
}
