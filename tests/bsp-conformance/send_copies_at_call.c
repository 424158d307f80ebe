/* expect: ok
 * bsp_send copies tag and payload when called. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), tagsize = sizeof(int);
    bsp_set_tagsize(&tagsize);
    bsp_sync();
    int tag = 1000 + s, v = value_of(s, 0);
    bsp_send((s + 1) % p, &tag, &v, sizeof v);
    tag = -1;
    v = -1;
    bsp_sync();
    int status, got_tag, got;
    bsp_get_tag(&status, &got_tag);
    bsp_move(&got, sizeof got);
    CHECK_INT(got_tag, 1000 + (s + p - 1) % p);
    CHECK_INT(got, value_of((s + p - 1) % p, 0));
    pass();
    bsp_end();
    return 0;
}
