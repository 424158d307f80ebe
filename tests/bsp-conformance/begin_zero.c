/* expect: abort "bsp_begin" "0"
 * At least one process must be asked for. */
#include "check.h"

int main(void)
{
    bsp_begin(0);
    bsp_end();
    return 0;
}
