/* expect: ok
 * A thousand registrations, each used once, then all popped. */
#include "check.h"

#define N 1000

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    static int cells[N];
    for (int i = 0; i < N; i++)
        bsp_push_reg(&cells[i], sizeof(int));
    bsp_sync();
    for (int i = 0; i < N; i++) {
        int v = value_of(s, i);
        bsp_put((s + 1) % p, &v, &cells[i], 0, sizeof v);
    }
    bsp_sync();
    for (int i = 0; i < N; i++)
        CHECK_INT(cells[i], value_of((s + p - 1) % p, i));
    for (int i = N - 1; i >= 0; i--)
        bsp_pop_reg(&cells[i]);
    bsp_sync();
    pass();
    bsp_end();
    return 0;
}
