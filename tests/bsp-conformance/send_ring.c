/* expect: ok
 * bsp_send to the right neighbour; the message is there in the next superstep. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int v = value_of(s, 0);
    bsp_send((s + 1) % p, NULL, &v, sizeof v);
    bsp_sync();
    int n = -1, bytes = -1;
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 1);
    CHECK_INT(bytes, sizeof(int));
    int got = 0;
    bsp_move(&got, sizeof got);
    CHECK_INT(got, value_of((s + p - 1) % p, 0));
    pass();
    bsp_end();
    return 0;
}
