/* expect: ok
 * output: "after end {P}"
 * After bsp_end, bsp_nprocs again gives the processes available (as
 * before bsp_begin); only process 0 is there to ask. */
#include "check.h"

int main(void)
{
    bsp_begin(1);
    bsp_end();
    printf("after end %d\nok\n", bsp_nprocs());
    return 0;
}
