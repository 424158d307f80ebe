/* expect: abort "bsp_set_tagsize" "alike"
 * procs: >=2
 * bsp_set_tagsize is collective: all processes call it in the same superstep
 * with the same size. Here all but process 0 call it, asking for the size
 * already in effect, so the sizes agree and only the calls differ. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    if (bsp_pid() != 0) {
        int t = 0;
        bsp_set_tagsize(&t);
    }
    bsp_sync();
    bsp_sync();
    bsp_end();
    return 0;
}
