/* expect: abort "bsp_put" "null"
 * A null source with a non-zero size is a misuse, not a crash. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put(0, NULL, &x, 0, sizeof x);
    bsp_sync();
    bsp_end();
    return 0;
}
