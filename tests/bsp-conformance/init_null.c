/* expect: abort "bsp_init" "null"
 * bsp_init needs an SPMD function. */
#include "check.h"

int main(int argc, char **argv)
{
    bsp_init(NULL, argc, argv);
    return 0;
}
