/* expect: ok
 * Every process sends one message to every process; each receives p messages,
 * one from each sender (tags carry the sender). */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), tagsize = sizeof(int);
    bsp_set_tagsize(&tagsize);
    bsp_sync();
    for (int to = 0; to < p; to++) {
        int v = value_of(s, to);
        bsp_send(to, &s, &v, sizeof v);
    }
    bsp_sync();
    int n, bytes;
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, p);
    CHECK_INT(bytes, p * (int)sizeof(int));
    char *seen = calloc((size_t)p, 1);
    for (int i = 0; i < p; i++) {
        int status, from, v;
        bsp_get_tag(&status, &from);
        CHECK_INT(status, sizeof(int));
        CHECK(from >= 0 && from < p && !seen[from]);
        seen[from] = 1;
        bsp_move(&v, sizeof v);
        CHECK_INT(v, value_of(from, s));
    }
    pass();
    bsp_end();
    free(seen);
    return 0;
}
