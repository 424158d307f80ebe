/* expect: ok
 * bsp_set_tagsize called several times in one superstep: each call returns
 * the size the previous one asked for (the size pending for the next
 * superstep), and the last call's size takes effect at the sync. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int t = 1;
    bsp_set_tagsize(&t);
    CHECK_INT(t, 0);
    t = 0;
    bsp_set_tagsize(&t);
    CHECK_INT(t, 1);
    t = 1;
    bsp_set_tagsize(&t);
    CHECK_INT(t, 0);
    bsp_sync();
    /* The tag size is 1 now: a one-byte tag travels whole. */
    char tag = (char)('a' + s % 26);
    bsp_send((s + 1) % p, &tag, &s, sizeof s);
    t = 5;
    bsp_set_tagsize(&t);
    CHECK_INT(t, 1);
    bsp_sync();
    int status;
    char got[5] = {0};
    bsp_get_tag(&status, got);
    CHECK_INT(status, sizeof(int));
    CHECK_INT(got[0], 'a' + (s + p - 1) % p % 26);
    t = 5;
    bsp_set_tagsize(&t);
    CHECK_INT(t, 5);
    bsp_sync();
    pass();
    bsp_end();
    return 0;
}
