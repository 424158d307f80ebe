/* expect: abort "bsp_get_tag" "null"
 * bsp_get_tag needs somewhere to write the status. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int tag;
    bsp_get_tag(NULL, &tag);
    bsp_end();
    return 0;
}
