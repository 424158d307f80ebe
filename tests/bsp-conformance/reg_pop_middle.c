/* expect: ok
 * Popping a registration that is not the most recent leaves the others usable. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int a = 0, b = 0, c = 0;
    bsp_push_reg(&a, sizeof a);
    bsp_push_reg(&b, sizeof b);
    bsp_push_reg(&c, sizeof c);
    bsp_sync();
    bsp_pop_reg(&b);
    bsp_sync();
    int to = (s + 1) % p, from = (s + p - 1) % p;
    int va = value_of(s, 1), vc = value_of(s, 3);
    bsp_put(to, &va, &a, 0, sizeof va);
    bsp_put(to, &vc, &c, 0, sizeof vc);
    bsp_sync();
    CHECK_INT(a, value_of(from, 1));
    CHECK_INT(b, 0);
    CHECK_INT(c, value_of(from, 3));
    pass();
    bsp_end();
    return 0;
}
