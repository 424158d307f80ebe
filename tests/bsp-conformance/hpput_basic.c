/* expect: ok
 * bsp_hpput delivers like bsp_put when the source is left alone until the sync. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int src[16], dst[16] = {0};
    for (int i = 0; i < 16; i++)
        src[i] = value_of(s, i);
    bsp_push_reg(dst, sizeof dst);
    bsp_sync();
    bsp_hpput((s + 1) % p, src, dst, 0, sizeof src);
    bsp_sync();
    for (int i = 0; i < 16; i++)
        CHECK_INT(dst[i], value_of((s + p - 1) % p, i));
    pass();
    bsp_end();
    return 0;
}
