/* expect: ok
 * Messages are visible only during the next superstep: not in the one they
 * are sent in (not even to oneself), and gone after the one after. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), n = -1, bytes = -1;
    bsp_send(s, NULL, &s, sizeof s);
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 0);
    CHECK_INT(bytes, 0);
    bsp_sync();
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 1);
    bsp_sync(); /* not moved: dropped at this sync */
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 0);
    CHECK_INT(bytes, 0);
    pass();
    bsp_end();
    return 0;
}
