/* expect: abort "bsp_move" "empty"
 * One message, two moves: the second finds the queue empty. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), v;
    bsp_send(s, NULL, &s, sizeof s);
    bsp_sync();
    bsp_move(&v, sizeof v);
    CHECK_INT(v, s);
    bsp_move(&v, sizeof v);
    bsp_end();
    return 0;
}
