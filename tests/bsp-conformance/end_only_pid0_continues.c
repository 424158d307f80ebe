/* expect: ok
 * After bsp_end only process 0 goes on with main: the line after it is
 * printed once whatever P is. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    bsp_sync();
    bsp_end();
    printf("ok\n");
    return 0;
}
