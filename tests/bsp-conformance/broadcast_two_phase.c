/* expect: ok
 * A two-phase broadcast: process 0 scatters pieces, then everyone
 * all-gathers them. */
#include "check.h"

#define N 1000

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    static int data[N];
    if (s == 0)
        for (int i = 0; i < N; i++)
            data[i] = value_of(0, i);
    bsp_push_reg(data, sizeof data);
    bsp_sync();
    int piece = (N + p - 1) / p;
    if (s == 0)
        for (int to = 1; to < p; to++) {
            int lo = to * piece, hi = lo + piece > N ? N : lo + piece;
            if (lo < hi)
                bsp_put(to, data + lo, data, lo * (int)sizeof(int), (hi - lo) * (int)sizeof(int));
        }
    bsp_sync();
    int lo = s * piece, hi = lo + piece > N ? N : lo + piece;
    if (lo < hi)
        for (int to = 0; to < p; to++)
            if (to != s)
                bsp_put(to, data + lo, data, lo * (int)sizeof(int), (hi - lo) * (int)sizeof(int));
    bsp_sync();
    for (int i = 0; i < N; i++)
        CHECK_INT(data[i], value_of(0, i));
    pass();
    bsp_end();
    return 0;
}
