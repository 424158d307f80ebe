/* expect: ok
 * stdin: "21 half"
 * output: "read 21 half"
 * Standard input goes to process 0, which shares what it read. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid(), n = 0;
    char word[16] = {0};
    bsp_push_reg(&n, sizeof n);
    bsp_push_reg(word, sizeof word);
    bsp_sync();
    if (s == 0) {
        CHECK(scanf("%d %15s", &n, word) == 2);
        printf("read %d %s\n", n, word);
        for (int to = 1; to < p; to++) {
            bsp_put(to, &n, &n, 0, sizeof n);
            bsp_put(to, word, word, 0, sizeof word);
        }
    }
    bsp_sync();
    CHECK_INT(n, 21);
    CHECK(strcmp(word, "half") == 0);
    pass();
    bsp_end();
    return 0;
}
