/* expect: ok
 * The tag size starts at 0; bsp_set_tagsize returns the old size through
 * its argument. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int t = 8;
    bsp_set_tagsize(&t);
    CHECK_INT(t, 0);
    bsp_sync();
    t = 2;
    bsp_set_tagsize(&t);
    CHECK_INT(t, 8);
    bsp_sync();
    pass();
    bsp_end();
    return 0;
}
