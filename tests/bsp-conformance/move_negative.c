/* expect: abort "bsp_move" "negative"
 * A negative reception size is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), v;
    bsp_send(s, NULL, &s, sizeof s);
    bsp_sync();
    bsp_move(&v, -4);
    bsp_end();
    return 0;
}
