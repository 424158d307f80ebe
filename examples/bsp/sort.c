/* expect: ok
 * output: "sorted"
 *
 * Parallel sample sort with regular sampling.
 *
 *   bspcc -O2 -o sort sort.c && bsprun -npes 4 ./sort [keys per process]
 *
 * Superstep 1: every process sorts its keys and puts p regular samples into
 * every process's sample table. Superstep 2: every process sorts the p^2
 * samples, picks the same p - 1 splitters, and sends each bucket to its
 * process as one BSMP message. Superstep 3: every process merges what it
 * received and the result is checked: each part sorted, parts in order
 * across processes (a get of the right neighbour's first key), no key lost
 * (count and checksum of all keys, gathered with puts).
 */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* A small LCG per process, so every run sorts the same keys. */
static unsigned next_key(unsigned long long *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(*state >> 33);
}

int main(int argc, char **argv)
{
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    if (n < p)
        bsp_abort("sort: need at least %d keys per process, not %d\n", p, n);

    unsigned *keys = malloc((size_t)n * sizeof(unsigned));
    unsigned long long state = 12345 + (unsigned long long)s * 1000003ULL;
    unsigned long long checksum_in = 0;
    for (int i = 0; i < n; i++) {
        keys[i] = next_key(&state);
        checksum_in += keys[i];
    }

    /* Superstep 1: local sort, regular samples to everyone. */
    unsigned *samples = malloc((size_t)(p * p) * sizeof(unsigned));
    bsp_push_reg(samples, p * p * (int)sizeof(unsigned));
    bsp_sync();
    qsort(keys, (size_t)n, sizeof(unsigned), compare);
    unsigned *mine = malloc((size_t)p * sizeof(unsigned));
    for (int i = 0; i < p; i++)
        mine[i] = keys[(long)i * n / p];
    for (int to = 0; to < p; to++)
        bsp_put(to, mine, samples, s * p * (int)sizeof(unsigned), p * (int)sizeof(unsigned));
    bsp_sync();

    /* Superstep 2: the same splitters everywhere; buckets as messages. */
    qsort(samples, (size_t)(p * p), sizeof(unsigned), compare);
    int lo = 0;
    for (int to = 0; to < p; to++) {
        int hi = n;
        if (to < p - 1) {
            unsigned splitter = samples[(to + 1) * p];
            hi = lo;
            while (hi < n && keys[hi] < splitter)
                hi++;
        }
        bsp_send(to, NULL, keys + lo, (hi - lo) * (int)sizeof(unsigned));
        lo = hi;
    }
    bsp_sync();

    /* Superstep 3: collect, sort, check. */
    int messages, bytes;
    bsp_qsize(&messages, &bytes);
    int m = bytes / (int)sizeof(unsigned);
    unsigned *part = malloc((size_t)(m > 0 ? m : 1) * sizeof(unsigned));
    int filled = 0;
    for (int i = 0; i < messages; i++) {
        int status;
        bsp_get_tag(&status, NULL);
        bsp_move(part + filled, status);
        filled += status / (int)sizeof(unsigned);
    }
    qsort(part, (size_t)m, sizeof(unsigned), compare);

    unsigned long long checksum_out = 0;
    for (int i = 0; i < m; i++)
        checksum_out += part[i];
    /* Totals of counts and checksums, and the right neighbour's first key. */
    unsigned long long totals[4] = {(unsigned long long)n, checksum_in, (unsigned long long)m, checksum_out};
    unsigned long long *table = calloc((size_t)(4 * p), sizeof(unsigned long long));
    unsigned first = m > 0 ? part[0] : 0xffffffffu, right_first = 0xffffffffu;
    int has_keys = m > 0, right_has_keys = 0;
    bsp_push_reg(table, 4 * p * (int)sizeof(unsigned long long));
    bsp_push_reg(&first, sizeof first);
    bsp_push_reg(&has_keys, sizeof has_keys);
    bsp_sync();
    for (int to = 0; to < p; to++)
        bsp_put(to, totals, table, 4 * s * (int)sizeof(unsigned long long), sizeof totals);
    if (s + 1 < p) {
        bsp_get(s + 1, &first, 0, &right_first, sizeof right_first);
        bsp_get(s + 1, &has_keys, 0, &right_has_keys, sizeof right_has_keys);
    }
    bsp_sync();

    for (int i = 1; i < m; i++)
        if (part[i - 1] > part[i])
            bsp_abort("sort: process %d: keys %d and %d out of order\n", s, i - 1, i);
    if (m > 0 && right_has_keys && part[m - 1] > right_first)
        bsp_abort("sort: process %d: last key above process %d's first\n", s, s + 1);
    unsigned long long sum[4] = {0, 0, 0, 0};
    for (int i = 0; i < p; i++)
        for (int k = 0; k < 4; k++)
            sum[k] += table[4 * i + k];
    if (sum[0] != sum[2] || sum[1] != sum[3])
        bsp_abort("sort: %llu keys (checksum %llu) in, %llu keys (checksum %llu) out\n", sum[0], sum[1], sum[2],
                  sum[3]);
    if (s == 0) {
        printf("sorted %llu keys on %d processes\n", sum[2], p);
        printf("ok\n");
    }
    bsp_end();
    free(keys);
    free(samples);
    free(mine);
    free(part);
    free(table);
    return 0;
}
