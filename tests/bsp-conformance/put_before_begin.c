/* expect: abort "bsp_put" "bsp_begin"
 * A put before bsp_begin is a misuse. */
#include "check.h"

int main(void)
{
    int x = 0;
    bsp_put(0, &x, &x, 0, sizeof x);
    return 0;
}
