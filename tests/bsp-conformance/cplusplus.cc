/* expect: ok
 * bsp.h compiles as C++ and links: the declarations have C linkage. */
#include <bsp.h>
#include <cstdio>
#include <vector>

int main()
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    std::vector<int> all(p, -1);
    bsp_push_reg(all.data(), p * (int)sizeof(int));
    bsp_sync();
    for (int to = 0; to < p; to++)
        bsp_put(to, &s, all.data(), s * (int)sizeof(int), sizeof s);
    bsp_sync();
    for (int i = 0; i < p; i++)
        if (all[i] != i)
            bsp_abort("FAIL all[%d] is %d\n", i, all[i]);
    if (s == 0)
        std::printf("ok\n");
    bsp_end();
    return 0;
}
