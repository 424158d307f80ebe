/* expect: abort "bsp_put" "does not exist" "-1"
 * A negative destination pid is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put(-1, &x, &x, 0, sizeof x);
    bsp_sync();
    bsp_end();
    return 0;
}
