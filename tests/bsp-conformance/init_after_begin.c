/* expect: abort "bsp_init"
 * bsp_init comes before bsp_begin, never inside the SPMD part. */
#include "check.h"

static void spmd(void)
{
}

int main(int argc, char **argv)
{
    bsp_begin(bsp_nprocs());
    bsp_init(spmd, argc, argv);
    bsp_end();
    return 0;
}
