/* expect: abort "bsp_move" "empty"
 * bsp_move with no message waiting is a misuse. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int v;
    bsp_move(&v, sizeof v);
    bsp_end();
    return 0;
}
