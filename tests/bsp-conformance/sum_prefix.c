/* expect: ok
 * Parallel prefix sums in log2(p) supersteps (the standard's bsp_sum
 * example): process s ends with 1 + 2 + ... + (s + 1). */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int left = 0, sum = s + 1;
    bsp_push_reg(&left, sizeof left);
    bsp_sync();
    for (int d = 1; d < p; d *= 2) {
        if (s + d < p)
            bsp_put(s + d, &sum, &left, 0, sizeof sum);
        bsp_sync();
        if (s >= d)
            sum += left;
    }
    CHECK_INT(sum, (s + 1) * (s + 2) / 2);
    pass();
    bsp_end();
    return 0;
}
