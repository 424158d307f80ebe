/* expect: ok
 * Draining the queue with bsp_hpmove: the pointers stay valid until the sync. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    for (int to = 0; to < p; to++) {
        int v = value_of(s, to);
        bsp_send(to, NULL, &v, sizeof v);
    }
    bsp_sync();
    void *tp, *pp;
    void **payloads = malloc((size_t)p * sizeof(void *));
    int n = 0, len;
    while ((len = bsp_hpmove(&tp, &pp)) >= 0) {
        CHECK_INT(len, sizeof(int));
        CHECK(n < p);
        payloads[n++] = pp;
    }
    CHECK_INT(n, p);
    long long sum = 0, want = 0;
    for (int i = 0; i < p; i++) {
        int v;
        memcpy(&v, payloads[i], sizeof v);
        sum += v;
        want += value_of(i, s);
    }
    CHECK_INT(sum, want);
    pass();
    bsp_end();
    free(payloads);
    return 0;
}
