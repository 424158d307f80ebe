/* expect: abort "tag sizes differ"
 * procs: >=2
 * Only process 0 changes the tag size: the others keep 0, which differs. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    if (bsp_pid() == 0) {
        int t = 4;
        bsp_set_tagsize(&t);
    }
    bsp_sync();
    bsp_sync();
    bsp_end();
    return 0;
}
