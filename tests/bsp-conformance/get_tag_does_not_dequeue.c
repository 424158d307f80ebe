/* expect: ok
 * bsp_get_tag looks at the first message without removing it. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), t = sizeof(int);
    bsp_set_tagsize(&t);
    bsp_sync();
    int tag = 31;
    bsp_send(s, &tag, &s, sizeof s);
    bsp_sync();
    int status, a = 0, b = 0, n, bytes;
    bsp_get_tag(&status, &a);
    bsp_get_tag(&status, &b);
    CHECK_INT(a, 31);
    CHECK_INT(b, 31);
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 1);
    pass();
    bsp_end();
    return 0;
}
