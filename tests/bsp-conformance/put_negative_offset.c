/* expect: abort "bsp_put" "negative"
 * A negative offset is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x[2] = {0, 0};
    bsp_push_reg(x, sizeof x);
    bsp_sync();
    bsp_put(0, &x[0], x, -4, sizeof(int));
    bsp_sync();
    bsp_end();
    return 0;
}
