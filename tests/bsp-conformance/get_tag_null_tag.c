/* expect: abort "bsp_get_tag" "null"
 * With a tag size above 0 and a message waiting, the tag pointer must not be null. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int t = 4, s = bsp_pid();
    bsp_set_tagsize(&t);
    bsp_sync();
    bsp_send(s, &s, &s, sizeof s);
    bsp_sync();
    int status;
    bsp_get_tag(&status, NULL);
    bsp_end();
    return 0;
}
