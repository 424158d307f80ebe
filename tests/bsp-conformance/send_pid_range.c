/* expect: abort "bsp_send" "does not exist"
 * The destination of a message must be a pid below bsp_nprocs(). */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int v = 0;
    bsp_send(bsp_nprocs(), NULL, &v, sizeof v);
    bsp_sync();
    bsp_end();
    return 0;
}
