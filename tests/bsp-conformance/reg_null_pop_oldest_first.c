/* expect: ok
 * orders: every
 * Process 0 alone holds two arrays; the others register NULL for both (the
 * first of size 0 on process 0 too, the second sized). Process 0 then pops the OLDER one
 * first while the others pop NULL, which could mean either: they must pop
 * the same registration as process 0, or the slots of later registrations
 * differ between processes. Puts into the remaining array, and a new
 * registration made by all, check that they still agree. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int *a = NULL, *b = NULL;
    if (s == 0) {
        a = calloc((size_t)p, sizeof(int));
        b = calloc((size_t)p, sizeof(int));
        bsp_push_reg(a, p * (int)sizeof(int));
        bsp_push_reg(b, p * (int)sizeof(int));
    } else {
        bsp_push_reg(NULL, 0);
        bsp_push_reg(NULL, 0);
    }
    bsp_sync();
    bsp_pop_reg(s == 0 ? a : NULL);
    int v = value_of(s, 1);
    bsp_put(0, &v, b, s * (int)sizeof(int), sizeof v);
    bsp_sync();
    if (s == 0)
        for (int i = 0; i < p; i++)
            CHECK_INT(b[i], value_of(i, 1));
    /* b is the only registration of NULL left: its pop is plain. */
    int ring[2] = {0, 0};
    bsp_push_reg(ring, sizeof ring);
    bsp_sync();
    v = value_of(s, 2);
    bsp_put((s + 1) % p, &v, ring, sizeof(int), sizeof v);
    bsp_put(0, &v, b, s * (int)sizeof(int), sizeof v);
    bsp_pop_reg(s == 0 ? b : NULL);
    bsp_sync();
    CHECK_INT(ring[1], value_of((s + p - 1) % p, 2));
    if (s == 0)
        for (int i = 0; i < p; i++)
            CHECK_INT(b[i], value_of(i, 2));
    bsp_pop_reg(ring);
    bsp_sync();
    pass();
    bsp_end();
    free(a);
    free(b);
    return 0;
}
