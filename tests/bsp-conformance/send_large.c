/* expect: ok
 * One 512 KiB message arrives intact. */
#include "check.h"

#define N (128 * 1024)

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int *buf = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++)
        buf[i] = value_of(s, i);
    bsp_send((s + 1) % p, NULL, buf, N * (int)sizeof(int));
    memset(buf, 0, N * sizeof(int)); /* bsp_send copied it */
    bsp_sync();
    int status;
    bsp_get_tag(&status, NULL);
    CHECK_INT(status, N * (int)sizeof(int));
    bsp_move(buf, N * (int)sizeof(int));
    int from = (s + p - 1) % p;
    for (int i = 0; i < N; i++)
        if (buf[i] != value_of(from, i))
            CHECK_INT(buf[i], value_of(from, i));
    pass();
    bsp_end();
    free(buf);
    return 0;
}
