/* expect: ok
 * bsp_hpmove hands out pointers to tag and payload in place and dequeues. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), t = sizeof(int);
    bsp_set_tagsize(&t);
    bsp_sync();
    int tag = 500 + s, v[3] = {value_of(s, 0), value_of(s, 1), value_of(s, 2)};
    bsp_send((s + 1) % p, &tag, v, sizeof v);
    bsp_sync();
    void *tp = NULL, *pp = NULL;
    int len = bsp_hpmove(&tp, &pp);
    CHECK_INT(len, sizeof v);
    int from = (s + p - 1) % p, got_tag, got[3];
    memcpy(&got_tag, tp, sizeof got_tag); /* in-place data need not be aligned */
    memcpy(got, pp, sizeof got);
    CHECK_INT(got_tag, 500 + from);
    for (int i = 0; i < 3; i++)
        CHECK_INT(got[i], value_of(from, i));
    int n, bytes;
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 0);
    pass();
    bsp_end();
    return 0;
}
