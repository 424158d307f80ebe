/* expect: ok
 * bsp_init, then main decides how many processes to start (half of those
 * available); the SPMD part runs on exactly that many. Only process 0 runs
 * main, so the others' argument to bsp_begin is not meaningful: bsp_begin
 * takes process 0's, as the standard does. */
#include "check.h"

static int wanted;
static int total;

static void spmd(void)
{
    bsp_begin(wanted);
    int p = bsp_nprocs(), s = bsp_pid();
    /* Only process 0 ran main and knows `wanted`. */
    if (s == 0)
        CHECK_INT(p, wanted);
    int *slots = calloc((size_t)p, sizeof(int));
    bsp_push_reg(slots, p * (int)sizeof(int));
    bsp_sync();
    int mine = s + 1;
    bsp_put(0, &mine, slots, s * (int)sizeof(int), sizeof mine);
    bsp_sync();
    if (s == 0)
        for (int i = 0; i < p; i++)
            total += slots[i];
    bsp_pop_reg(slots);
    bsp_end();
    free(slots);
}

int main(int argc, char **argv)
{
    bsp_init(spmd, argc, argv);
    wanted = (bsp_nprocs() + 1) / 2;
    spmd();
    CHECK_INT(total, wanted * (wanted + 1) / 2);
    printf("ok\n");
    return 0;
}
