/* expect: ok
 * orders: every
 * The other order: process 0 pops its NEWER array first while the others
 * pop NULL, then, after puts into the older one (which the others name by
 * NULL, its only registration of NULL left), the older one; then every
 * process registers a new area, whose slot must agree everywhere. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int a[8] = {0}, b[8] = {0};
    if (s == 0) {
        bsp_push_reg(a, sizeof a);
        bsp_push_reg(b, sizeof b);
    } else {
        bsp_push_reg(NULL, 0);
        bsp_push_reg(NULL, 0);
    }
    bsp_sync();
    bsp_pop_reg(s == 0 ? b : NULL);
    bsp_sync();
    int v = value_of(s, 0);
    if (s < 8)
        bsp_put(0, &v, s == 0 ? a : NULL, s * (int)sizeof(int), sizeof v);
    bsp_sync();
    if (s == 0)
        for (int i = 0; i < p && i < 8; i++)
            CHECK_INT(a[i], value_of(i, 0));
    bsp_pop_reg(s == 0 ? a : NULL);
    int fresh = -1;
    bsp_push_reg(&fresh, sizeof fresh);
    bsp_sync();
    v = value_of(s, 3);
    bsp_put((s + 1) % p, &v, &fresh, 0, sizeof v);
    bsp_sync();
    CHECK_INT(fresh, value_of((s + p - 1) % p, 3));
    pass();
    bsp_end();
    return 0;
}
