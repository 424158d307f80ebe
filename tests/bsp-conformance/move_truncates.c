/* expect: ok
 * bsp_move copies at most reception_nbytes; the rest of the payload is dropped. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid();
    int out[4] = {value_of(s, 0), value_of(s, 1), value_of(s, 2), value_of(s, 3)};
    bsp_send(s, NULL, out, sizeof out);
    bsp_sync();
    int in[4] = {0, 0, 0, 0};
    bsp_move(in, 2 * sizeof(int));
    CHECK_INT(in[0], value_of(s, 0));
    CHECK_INT(in[1], value_of(s, 1));
    CHECK_INT(in[2], 0);
    CHECK_INT(in[3], 0);
    int n, bytes;
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 0);
    pass();
    bsp_end();
    return 0;
}
