/* expect: abort "bsp_begin" "already"
 * There is one bsp_begin/bsp_end pair per program. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    bsp_begin(bsp_nprocs());
    bsp_end();
    return 0;
}
