/* expect: ok
 * The typedefs BSPonMPI and MulticoreBSP programs use are ints. */
#include "check.h"

int main(void)
{
    bsp_nprocs_t n = bsp_nprocs();
    bsp_begin(n);
    bsp_pid_t s = bsp_pid();
    bsp_size_t size = (bsp_size_t)sizeof(int);
    CHECK_INT(sizeof(bsp_pid_t), sizeof(int));
    CHECK_INT(sizeof(bsp_nprocs_t), sizeof(int));
    CHECK_INT(sizeof(bsp_size_t), sizeof(int));
    int x = 0;
    bsp_push_reg(&x, size);
    bsp_sync();
    bsp_put((s + 1) % n, &s, &x, 0, size);
    bsp_sync();
    CHECK_INT(x, (s + n - 1) % n);
    pass();
    bsp_end();
    return 0;
}
