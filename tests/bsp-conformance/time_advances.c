/* expect: ok
 * bsp_time starts near 0, never goes back and counts a 50 ms sleep. */
#define _POSIX_C_SOURCE 199309L
#include "check.h"
#include <time.h>

int main(void)
{
    bsp_begin(bsp_nprocs());
    double t0 = bsp_time();
    CHECK(t0 >= 0.0 && t0 < 60.0);
    double last = t0;
    for (int i = 0; i < 10; i++) {
        bsp_sync();
        double t = bsp_time();
        CHECK(t >= last);
        last = t;
    }
    struct timespec nap = {0, 50 * 1000 * 1000};
    nanosleep(&nap, NULL);
    CHECK(bsp_time() - last >= 0.045);
    pass();
    bsp_end();
    return 0;
}
