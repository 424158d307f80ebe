/* expect: abort "before begin 7"
 * bsp_abort works before bsp_begin too. */
#include "check.h"

int main(void)
{
    bsp_abort("before begin %d", 7);
    return 0;
}
