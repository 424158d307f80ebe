/* expect: ok
 * Ten thousand 4-byte puts in one superstep (coalesced underneath). */
#include "check.h"

#define N 10000

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int *dst = calloc(N, sizeof(int));
    bsp_push_reg(dst, N * (int)sizeof(int));
    bsp_sync();
    for (int i = 0; i < N; i++) {
        int v = value_of(s, i);
        bsp_put((s + 1) % p, &v, dst, i * (int)sizeof(int), sizeof v);
    }
    bsp_sync();
    int from = (s + p - 1) % p;
    for (int i = 0; i < N; i++)
        if (dst[i] != value_of(from, i))
            CHECK_INT(dst[i], value_of(from, i));
    pass();
    bsp_end();
    free(dst);
    return 0;
}
