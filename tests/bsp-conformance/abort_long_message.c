/* expect: abort "tail-of-a-long-message"
 * A long abort message arrives whole. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    char pad[3001];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    if (bsp_pid() == 0)
        bsp_abort("%s tail-of-a-long-message", pad);
    bsp_sync();
    bsp_end();
    return 0;
}
