/* expect: abort "bsp_send" "null"
 * A null payload with a non-zero size is a misuse, not a crash. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    bsp_send(0, NULL, NULL, 16);
    bsp_sync();
    bsp_end();
    return 0;
}
