/* expect: ok
 * A new tag size takes effect at the next sync: messages sent in the same
 * superstep still use the old size, those sent after the sync the new one. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int t = 2 * sizeof(int);
    bsp_set_tagsize(&t);
    /* Still tag size 0 in this superstep: a NULL tag is fine. */
    bsp_send((s + 1) % p, NULL, &s, sizeof s);
    bsp_sync();
    int tag[2] = {s, -s}, status;
    bsp_send((s + 1) % p, tag, &s, sizeof s);
    bsp_sync();
    int got[2] = {0, 0};
    bsp_get_tag(&status, got);
    CHECK_INT(status, sizeof(int));
    CHECK_INT(got[0], (s + p - 1) % p);
    CHECK_INT(got[1], -((s + p - 1) % p));
    pass();
    bsp_end();
    return 0;
}
