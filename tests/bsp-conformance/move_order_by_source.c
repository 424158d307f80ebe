/* expect: ok
 * orders: every
 * The queue's order is documented: by sending process, lowest pid first,
 * then in the order each process sent. Every process sends three messages
 * to every process (itself too), visiting the destinations from its right
 * neighbour round, and a large one in the middle that takes several
 * packets; each receiver checks the whole order, tag and payload. */
#include "check.h"

#define LARGE 20000

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), t = sizeof(int);
    bsp_set_tagsize(&t);
    bsp_sync();
    int *large = malloc(LARGE * sizeof(int));
    for (int i = 0; i < LARGE; i++)
        large[i] = value_of(s, i);
    for (int i = 0; i < 3; i++) {
        for (int k = 1; k <= p; k++) {
            int to = (s + k) % p, payload = value_of(s, i);
            int tag = s * 10 + i;
            if (i == 1)
                bsp_send(to, &tag, large, LARGE * (int)sizeof(int));
            else
                bsp_send(to, &tag, &payload, sizeof payload);
        }
    }
    bsp_sync();
    int n, bytes;
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 3 * p);
    int *got = malloc(LARGE * sizeof(int));
    for (int from = 0; from < p; from++) {
        for (int i = 0; i < 3; i++) {
            int status, tag = -1;
            bsp_get_tag(&status, &tag);
            CHECK_INT(tag, from * 10 + i);
            CHECK_INT(status, i == 1 ? LARGE * (int)sizeof(int) : (int)sizeof(int));
            bsp_move(got, LARGE * (int)sizeof(int));
            CHECK_INT(got[0], value_of(from, i == 1 ? 0 : i));
            if (i == 1)
                CHECK_INT(got[LARGE - 1], value_of(from, LARGE - 1));
        }
    }
    bsp_qsize(&n, &bytes);
    CHECK_INT(n, 0);
    free(got);
    free(large);
    pass();
    bsp_end();
    return 0;
}
