/* expect: abort "vabort 3 three"
 * bsp_vabort takes a va_list, for programs with their own error functions. */
#include "check.h"

static void fail(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    bsp_vabort(format, args);
    va_end(args);
}

int main(void)
{
    bsp_begin(bsp_nprocs());
    if (bsp_pid() == 0)
        fail("vabort %d %s\n", 3, "three");
    bsp_sync();
    bsp_end();
    return 0;
}
