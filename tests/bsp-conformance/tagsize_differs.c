/* expect: abort "tag sizes differ"
 * procs: >=2
 * The tag size is set collectively: processes asking for different sizes
 * are stopped at the sync. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int t = bsp_pid() == 0 ? 4 : 8;
    bsp_set_tagsize(&t);
    bsp_sync();
    bsp_sync();
    bsp_end();
    return 0;
}
