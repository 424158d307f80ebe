/* expect: ok
 * A message with an empty payload still counts: qsize 1, status 0 (not -1). */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), tagsize = sizeof(int);
    bsp_set_tagsize(&tagsize);
    bsp_sync();
    int tag = value_of(s, 3);
    bsp_send((s + 1) % p, &tag, NULL, 0);
    bsp_sync();
    int n, bytes, status, got = 0;
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 1);
    CHECK_INT(bytes, 0);
    bsp_get_tag(&status, &got);
    CHECK_INT(status, 0);
    CHECK_INT(got, value_of((s + p - 1) % p, 3));
    bsp_move(NULL, 0);
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 0);
    pass();
    bsp_end();
    return 0;
}
