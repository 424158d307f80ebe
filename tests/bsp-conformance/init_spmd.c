/* expect: ok
 * bsp_init: main is not the SPMD part. Process 0 runs main, which calls the
 * SPMD function; the other processes run the SPMD function directly. After
 * bsp_end only process 0 continues, so "ok" is printed once. */
#include "check.h"

static int from_main;
static int result;

static void spmd(void)
{
    bsp_begin(bsp_nprocs());
    /* Only process 0 went through main's code after bsp_init. */
    if (bsp_pid() == 0)
        CHECK_INT(from_main, 5);
    else
        CHECK_INT(from_main, 0);
    result = bsp_nprocs() * 10 + bsp_pid();
    bsp_end();
}

int main(int argc, char **argv)
{
    bsp_init(spmd, argc, argv);
    from_main = 5;
    int available = bsp_nprocs();
    spmd();
    CHECK_INT(result, available * 10);
    printf("ok\n");
    return 0;
}
