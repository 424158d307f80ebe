/* expect: ok
 * Every process writes its own slot of every process's array (an all-gather). */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int *all = calloc((size_t)p, sizeof(int));
    bsp_push_reg(all, p * (int)sizeof(int));
    bsp_sync();
    int v = value_of(s, 2);
    for (int to = 0; to < p; to++)
        bsp_put(to, &v, all, s * (int)sizeof(int), sizeof v);
    bsp_sync();
    for (int i = 0; i < p; i++)
        CHECK_INT(all[i], value_of(i, 2));
    pass();
    bsp_end();
    free(all);
    return 0;
}
