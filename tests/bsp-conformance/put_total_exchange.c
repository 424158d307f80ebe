/* expect: ok
 * A total exchange: every process sends a block to every process. */
#include "check.h"

#define B 64

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int *in = calloc((size_t)(p * B), sizeof(int));
    int *out = malloc((size_t)(p * B) * sizeof(int));
    for (int i = 0; i < p * B; i++)
        out[i] = value_of(s, i);
    bsp_push_reg(in, p * B * (int)sizeof(int));
    bsp_sync();
    for (int to = 0; to < p; to++)
        bsp_put(to, out + to * B, in, s * B * (int)sizeof(int), B * (int)sizeof(int));
    bsp_sync();
    for (int from = 0; from < p; from++)
        for (int i = 0; i < B; i++)
            CHECK_INT(in[from * B + i], value_of(from, s * B + i));
    pass();
    bsp_end();
    free(in);
    free(out);
    return 0;
}
