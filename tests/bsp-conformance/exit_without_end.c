/* expect: abort "bsp_end"
 * Leaving main without bsp_end stops the job with a message, rather than
 * leaving the other processes waiting. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    bsp_sync();
    return 0;
}
