/* expect: ok
 * A message sent with 8-byte tags is read after the tag size went down to
 * 4: the queue's tags have the size of the superstep they were sent in, so
 * bsp_get_tag writes all 8 bytes and no more, and the payload is intact. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int s = bsp_pid(), t = 8;
    bsp_set_tagsize(&t);
    bsp_sync();
    char tag[8] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'};
    bsp_send(s, tag, &s, sizeof s);
    t = 4;
    bsp_set_tagsize(&t);
    CHECK_INT(t, 8);
    bsp_sync();
    char room[12];
    memset(room, '#', sizeof room);
    int status;
    bsp_get_tag(&status, room);
    CHECK_INT(status, sizeof(int));
    CHECK(memcmp(room, tag, 8) == 0);
    for (int i = 8; i < 12; i++)
        CHECK(room[i] == '#');
    int got = -1;
    bsp_move(&got, sizeof got);
    CHECK_INT(got, s);
    pass();
    bsp_end();
    return 0;
}
