/* expect: abort "bsp_qsize" "null"
 * bsp_qsize needs both pointers. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int n;
    bsp_qsize(&n, NULL);
    bsp_end();
    return 0;
}
