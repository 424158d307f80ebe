/* expect: ok
 * A thousand messages of varying size to one neighbour: qsize counts them
 * and their bytes, and each payload arrives intact. */
#include "check.h"

#define N 1000

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), tagsize = sizeof(int);
    bsp_set_tagsize(&tagsize);
    bsp_sync();
    int buf[64];
    long long total = 0;
    for (int i = 0; i < N; i++) {
        int len = i % 37;
        for (int k = 0; k < len; k++)
            buf[k] = value_of(s, i + k);
        bsp_send((s + 1) % p, &i, buf, len * (int)sizeof(int));
        total += len * (long long)sizeof(int);
    }
    bsp_sync();
    int n, bytes, from = (s + p - 1) % p;
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, N);
    CHECK_INT(bytes, total);
    char seen[N] = {0};
    for (int m = 0; m < N; m++) {
        int status, i;
        bsp_get_tag(&status, &i);
        CHECK(i >= 0 && i < N && !seen[i]);
        seen[i] = 1;
        CHECK_INT(status, (i % 37) * (int)sizeof(int));
        bsp_move(buf, sizeof buf);
        for (int k = 0; k < i % 37; k++)
            CHECK_INT(buf[k], value_of(from, i + k));
        bsp_qsize(&n, &bytes);
        CHECK_INT(n, N - m - 1);
    }
    pass();
    bsp_end();
    return 0;
}
