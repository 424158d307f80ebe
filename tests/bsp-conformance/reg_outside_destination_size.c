/* expect: abort "bsp_put" "outside"
 * procs: >=2
 * Process 1 registered 4 bytes where the others registered 8: a put of 8
 * bytes into process 1 is outside its registration. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid();
    int a[2] = {0, 0}, b[2] = {1, 2};
    bsp_push_reg(a, s == 1 ? (int)sizeof(int) : (int)sizeof a);
    bsp_sync();
    if (s == 0)
        bsp_put(1, b, a, 0, sizeof b);
    bsp_sync();
    bsp_end();
    return 0;
}
