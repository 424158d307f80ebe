/* expect: abort "bsp_set_tagsize" "null"
 * bsp_set_tagsize needs somewhere to read the size from. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    bsp_set_tagsize(NULL);
    bsp_sync();
    bsp_end();
    return 0;
}
