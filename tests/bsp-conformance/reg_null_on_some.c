/* expect: ok
 * The usual idiom: only process 0 holds the array; the others register
 * NULL with size 0 and put into process 0's array. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int *table = NULL;
    if (s == 0) {
        table = calloc((size_t)p, sizeof(int));
        bsp_push_reg(table, p * (int)sizeof(int));
    } else {
        bsp_push_reg(NULL, 0);
    }
    bsp_sync();
    int v = value_of(s, 0);
    bsp_put(0, &v, table, s * (int)sizeof(int), sizeof v);
    bsp_sync();
    if (s == 0)
        for (int i = 0; i < p; i++)
            CHECK_INT(table[i], value_of(i, 0));
    bsp_pop_reg(table);
    bsp_sync();
    pass();
    bsp_end();
    free(table);
    return 0;
}
