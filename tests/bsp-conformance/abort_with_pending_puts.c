/* expect: abort "gave up"
 * An abort with puts and sends pending stops the job without delivering them. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int x = 0, s = bsp_pid();
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put((s + 1) % bsp_nprocs(), &s, &x, 0, sizeof s);
    bsp_send((s + 1) % bsp_nprocs(), NULL, &s, sizeof s);
    if (s == 0)
        bsp_abort("gave up after %d puts", 1);
    bsp_sync();
    bsp_end();
    return 0;
}
