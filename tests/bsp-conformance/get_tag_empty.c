/* expect: ok
 * bsp_get_tag on an empty queue sets the status to -1. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int status = 5, tag = 0;
    bsp_get_tag(&status, &tag);
    CHECK_INT(status, -1);
    pass();
    bsp_end();
    return 0;
}
