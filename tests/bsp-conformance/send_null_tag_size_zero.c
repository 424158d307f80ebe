/* expect: ok
 * With the default tag size of 0, the tag pointer may be NULL and get_tag
 * writes nothing through its tag argument. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid();
    bsp_send(s, NULL, &s, sizeof s);
    bsp_sync();
    int status, untouched = 77;
    bsp_get_tag(&status, &untouched);
    CHECK_INT(status, sizeof(int));
    CHECK_INT(untouched, 77);
    bsp_get_tag(&status, NULL);
    CHECK_INT(status, sizeof(int));
    pass();
    bsp_end();
    return 0;
}
