/* expect: abort "bsp_sync" "ambiguous"
 * procs: >=2
 * Every process pops NULL while it has two registrations of NULL, and no
 * process names the registration by its address, so nobody can tell which
 * is meant; the processes' most recent ones differ (even processes
 * registered (x, NULL, NULL), odd ones (NULL, NULL, y)). The sync says the
 * choice is ambiguous rather than letting the processes disagree. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int even = bsp_pid() % 2 == 0, x = 0, y = 0;
    bsp_push_reg(even ? &x : NULL, even ? (int)sizeof x : 0);
    bsp_push_reg(NULL, 0);
    bsp_push_reg(even ? NULL : &y, even ? 0 : (int)sizeof y);
    bsp_sync();
    bsp_pop_reg(NULL);
    bsp_sync();
    bsp_end();
    return 0;
}
