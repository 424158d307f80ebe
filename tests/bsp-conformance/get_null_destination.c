/* expect: abort "bsp_get" "null"
 * A null destination with a non-zero size is a misuse, not a crash. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_get(0, &x, 0, NULL, sizeof x);
    bsp_sync();
    bsp_end();
    return 0;
}
