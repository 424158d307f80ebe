/* expect: ok
 * With nothing sent, the queue is empty in every superstep. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    for (int i = 0; i < 3; i++) {
        int n = -1, bytes = -1;
        bsp_qsize(&n, &bytes);
        CHECK_INT(n, 0);
        CHECK_INT(bytes, 0);
        bsp_sync();
    }
    pass();
    bsp_end();
    return 0;
}
