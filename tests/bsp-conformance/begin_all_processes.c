/* expect: ok
 * bsp_begin(bsp_nprocs()) starts every available process, each with a
 * distinct pid in 0 .. nprocs-1. */
#include "check.h"

int main(void)
{
    int available = bsp_nprocs();
    bsp_begin(available);
    int p = bsp_nprocs(), s = bsp_pid();
    CHECK_INT(p, available);
    CHECK(s >= 0 && s < p);
    /* Every process marks its pid in process 0's table. */
    char *seen = calloc((size_t)p, 1);
    bsp_push_reg(seen, p);
    bsp_sync();
    char one = 1;
    bsp_put(0, &one, seen, s, 1);
    bsp_sync();
    if (s == 0)
        for (int i = 0; i < p; i++)
            CHECK_INT(seen[i], 1);
    pass();
    bsp_end();
    free(seen);
    return 0;
}
