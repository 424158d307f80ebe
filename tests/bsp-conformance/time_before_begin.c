/* expect: abort "bsp_time" "bsp_begin"
 * bsp_time counts from bsp_begin, so it has no value before. */
#include "check.h"

int main(void)
{
    printf("%f\n", bsp_time());
    return 0;
}
