/* expect: ok
 * bsp_hpget delivers when both sides leave the memory alone until the sync. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int src[16], dst[16] = {0};
    for (int i = 0; i < 16; i++)
        src[i] = value_of(s, i);
    bsp_push_reg(src, sizeof src);
    bsp_sync();
    bsp_hpget((s + 1) % p, src, 0, dst, sizeof dst);
    bsp_sync();
    for (int i = 0; i < 16; i++)
        CHECK_INT(dst[i], value_of((s + 1) % p, i));
    pass();
    bsp_end();
    return 0;
}
