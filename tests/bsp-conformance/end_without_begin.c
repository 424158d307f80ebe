/* expect: abort "bsp_end" "bsp_begin"
 * bsp_end needs a bsp_begin before it. */
#include "check.h"

int main(void)
{
    bsp_end();
    return 0;
}
