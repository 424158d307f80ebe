/* expect: abort "bsp_set_tagsize" "negative"
 * A negative tag size is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int t = -2;
    bsp_set_tagsize(&t);
    bsp_sync();
    bsp_end();
    return 0;
}
