/* expect: abort "bsp_move" "null"
 * A null destination for a non-empty payload is a misuse, not a crash. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid();
    bsp_send(s, NULL, &s, sizeof s);
    bsp_sync();
    bsp_move(NULL, sizeof s);
    bsp_end();
    return 0;
}
