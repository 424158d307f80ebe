/* expect: abort "bsp_end"
 * A second bsp_end is a misuse (run on one process, so it reaches it). */
#include "check.h"

int main(void)
{
    bsp_begin(1);
    bsp_end();
    bsp_end();
    return 0;
}
