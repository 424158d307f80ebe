/* expect: abort "bsp_send" "null"
 * With a tag size above 0 the tag pointer must not be null. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int t = 4, v = 0;
    bsp_set_tagsize(&t);
    bsp_sync();
    bsp_send(0, NULL, &v, sizeof v);
    bsp_sync();
    bsp_end();
    return 0;
}
