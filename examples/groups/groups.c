/* expect: ok
 * output: "every result checked"
 *
 * Groups from C: a broadcast, an allreduce and a gather on every process,
 * then a group of the even processes with a post to each other member,
 * and a misuse that comes back as an error. Checks every result; prints
 * "ok" on process 0.
 *
 *   bspcc -o groups examples/groups/groups.c && bulkwire run -n 4 ./groups
 */
#include <bsp.h>
#include <bulkwire.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                              \
    do {                                                                                      \
        if ((x) < 0) {                                                                        \
            fprintf(stderr, "%d: %s failed: %s\n", bsp_pid(), #x, bw_error());                \
            bsp_abort("groups.c: a call failed\n");                                           \
        }                                                                                     \
    } while (0)
#define EXPECT(c)                                                                             \
    do {                                                                                      \
        if (!(c)) bsp_abort("groups.c: %d: %s does not hold\n", bsp_pid(), #c);               \
    } while (0)

int main(void) {
    bsp_begin(bsp_nprocs());
    int me = bsp_pid(), p = bsp_nprocs(), all = bw_group_world();

    char text[32] = {0};
    if (me == p - 1) strcpy(text, "hello from the last");
    CHECK(bw_bcast(all, p - 1, text, sizeof text));
    EXPECT(strcmp(text, "hello from the last") == 0);

    double v[3] = {me, 2.0 * me, 1.0};
    CHECK(bw_allreduce(all, v, 3, BW_DOUBLE, BW_SUM));
    EXPECT(v[0] == p * (p - 1) / 2.0 && v[1] == p * (p - 1) && v[2] == p);

    int mine = 10 * me, *every = calloc((size_t)p, sizeof(int));
    CHECK(bw_gather(all, 0, &mine, sizeof mine, every));
    if (me == 0)
        for (int i = 0; i < p; i++) EXPECT(every[i] == 10 * i);

    /* The even processes: process 0 creates the group with the others in it. */
    int evens[64], n = 0;
    for (int i = 2; i < p; i += 2) evens[n++] = i;
    int g = -1;
    if (me == 0) g = bw_group_create("evens", evens, n);
    else if (me % 2 == 0) g = bw_group_find("evens");
    if (me % 2 == 0) {
        CHECK(g);
        CHECK(bw_group_wait_members(g, n + 1));
        CHECK(bw_post(g, 5, &me, sizeof me));
        for (int k = 0; k < n; k++) {
            int from, tag, got = -1;
            CHECK(bw_recv(g, -1, 5, &got, sizeof got, &from, &tag));
            EXPECT(got == from && from % 2 == 0 && from != me && tag == 5);
        }
        long long count = 1;
        CHECK(bw_allreduce(g, &count, 1, BW_INT64, BW_SUM));
        EXPECT(count == n + 1);
    }
    /* Best-effort posts are chosen per group; a group that does not exist
       is refused. */
    CHECK(bw_group_set_best_effort(all, 1));
    CHECK(bw_group_set_best_effort(all, 0));
    EXPECT(bw_group_set_best_effort(12345, 1) == -1);
    /* A root that is not a member is refused, with the reason. */
    if (me % 2 == 0) {
        EXPECT(bw_bcast(g, 1, text, sizeof text) == -1);
        EXPECT(strstr(bw_error(), "rank 1 is not a member of group \"evens\"") != NULL);
    }
    CHECK(bw_barrier(all));
    if (me == 0) printf("groups.c: every result checked on %d processes\nok\n", p);
    free(every);
    bsp_end();
    return 0;
}
