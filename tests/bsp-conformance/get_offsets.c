/* expect: ok
 * Every process gathers everyone's slot s with gets at offsets. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int *row = malloc((size_t)p * sizeof(int)), *col = calloc((size_t)p, sizeof(int));
    for (int i = 0; i < p; i++)
        row[i] = value_of(s, i);
    bsp_push_reg(row, p * (int)sizeof(int));
    bsp_sync();
    for (int from = 0; from < p; from++)
        bsp_get(from, row, s * (int)sizeof(int), &col[from], sizeof(int));
    bsp_sync();
    for (int from = 0; from < p; from++)
        CHECK_INT(col[from], value_of(from, s));
    pass();
    bsp_end();
    free(row);
    free(col);
    return 0;
}
