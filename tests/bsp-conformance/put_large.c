/* expect: ok
 * A 1 MiB put, split into many packets underneath, arrives intact. */
#include "check.h"

#define N (256 * 1024)

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int *src = malloc(N * sizeof(int)), *dst = calloc(N, sizeof(int));
    for (int i = 0; i < N; i++)
        src[i] = value_of(s, i);
    bsp_push_reg(dst, N * (int)sizeof(int));
    bsp_sync();
    bsp_put((s + 1) % p, src, dst, 0, N * (int)sizeof(int));
    bsp_sync();
    int from = (s + p - 1) % p;
    for (int i = 0; i < N; i++)
        if (dst[i] != value_of(from, i))
            CHECK_INT(dst[i], value_of(from, i));
    pass();
    bsp_end();
    free(src);
    free(dst);
    return 0;
}
