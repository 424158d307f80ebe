/* expect: ok
 * Reverse a block-distributed array with puts (the standard's example). */
#include "check.h"

#define B 5

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), n = p * B;
    int mine[B], out[B];
    for (int i = 0; i < B; i++)
        mine[i] = s * B + i; /* global index */
    bsp_push_reg(out, sizeof out);
    bsp_sync();
    for (int i = 0; i < B; i++) {
        int g = n - 1 - (s * B + i);
        bsp_put(g / B, &mine[i], out, (g % B) * (int)sizeof(int), sizeof(int));
    }
    bsp_sync();
    for (int i = 0; i < B; i++)
        CHECK_INT(out[i], n - 1 - (s * B + i));
    pass();
    bsp_end();
    return 0;
}
