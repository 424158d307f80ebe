/* expect: ok
 * Process 0 gets a block from every process in one superstep. */
#include "check.h"

#define B 100

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int block[B];
    for (int i = 0; i < B; i++)
        block[i] = value_of(s, i);
    int *all = s == 0 ? calloc((size_t)(p * B), sizeof(int)) : NULL;
    bsp_push_reg(block, sizeof block);
    bsp_sync();
    if (s == 0)
        for (int from = 0; from < p; from++)
            bsp_get(from, block, 0, all + from * B, sizeof block);
    bsp_sync();
    if (s == 0)
        for (int from = 0; from < p; from++)
            for (int i = 0; i < B; i++)
                CHECK_INT(all[from * B + i], value_of(from, i));
    pass();
    bsp_end();
    free(all);
    return 0;
}
