/* expect: ok
 * NULL pushed first on some processes and second on others, in the same
 * superstep as pops of NULL: even processes register (x, NULL), odd ones
 * (NULL, y); later the registrations are popped oldest first, each process
 * naming NULL where it registered NULL. Neither order makes two processes
 * disagree. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int x = -1, y = -1;
    bsp_push_reg(s % 2 == 0 ? &x : NULL, s % 2 == 0 ? (int)sizeof x : 0);
    bsp_push_reg(s % 2 == 1 ? &y : NULL, s % 2 == 1 ? (int)sizeof y : 0);
    bsp_sync();
    /* Puts into x on even processes and into y on odd ones, two ahead. */
    int v = value_of(s, 4), to = (s + 2) % p;
    if (p % 2 == 0 || s + 2 < p)
        bsp_put(to, &v, s % 2 == 0 ? (void *)&x : (void *)&y, 0, sizeof v);
    bsp_pop_reg(s % 2 == 0 ? &x : NULL);
    bsp_sync();
    /* Process s heard from s - 2, which put unless that wrapped round an
     * odd P (to a process of the other parity). */
    if (p % 2 == 0 || s >= 2)
        CHECK_INT(s % 2 == 0 ? x : y, value_of((s + p - 2) % p, 4));
    bsp_pop_reg(s % 2 == 1 ? &y : NULL);
    int z = 0;
    bsp_push_reg(&z, sizeof z);
    bsp_sync();
    v = value_of(s, 5);
    bsp_put((s + 1) % p, &v, &z, 0, sizeof v);
    bsp_sync();
    CHECK_INT(z, value_of((s + p - 1) % p, 5));
    pass();
    bsp_end();
    return 0;
}
