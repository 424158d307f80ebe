/* expect: ok
 * args: alpha beta
 * The program's arguments reach main on every process and bsp_init takes them. */
#include "check.h"

static int saved_argc;
static char **saved_argv;

static void spmd(void)
{
    bsp_begin(bsp_nprocs());
    CHECK_INT(saved_argc, 3);
    CHECK(strcmp(saved_argv[1], "alpha") == 0);
    CHECK(strcmp(saved_argv[2], "beta") == 0);
    pass();
    bsp_end();
}

int main(int argc, char **argv)
{
    saved_argc = argc;
    saved_argv = argv;
    bsp_init(spmd, argc, argv);
    spmd();
    return 0;
}
