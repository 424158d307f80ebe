/* expect: ok
 * Puts at odd offsets and odd lengths into a byte buffer. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    char buf[64], text[] = "bulk synchronous";
    memset(buf, '.', sizeof buf);
    bsp_push_reg(buf, sizeof buf);
    bsp_sync();
    bsp_put((s + 1) % p, text + 3, buf, 7, 11);
    bsp_sync();
    CHECK(memcmp(buf + 7, text + 3, 11) == 0);
    CHECK(buf[6] == '.' && buf[18] == '.');
    pass();
    bsp_end();
    return 0;
}
