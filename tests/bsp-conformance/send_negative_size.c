/* expect: abort "bsp_send" "negative"
 * A negative payload size is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int v = 0;
    bsp_send(0, NULL, &v, -1);
    bsp_sync();
    bsp_end();
    return 0;
}
