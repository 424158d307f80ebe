/*
 * The sweeps of `bulkwire bench pingpong` and `bulkwire bench bw`, the
 * total exchange of `bulkwire bench total-exchange` and the ring of
 * `bulkwire bench put`, with MPI, printed as a
 * table or (--json) as rows of bulkwire's row format (docs/BENCHMARKS.md),
 * so that bulkwire can be compared with an MPI library on the same machine.
 * Run by those benchmarks (crates/bench/src/mpi.rs) and by
 * scripts/ompi-bench.sh.
 *
 *   bench pingpong|bw [--json] [--transport T] [--iterations N] [--min-size BYTES] [--max-size BYTES] [--window W]
 *   bench alltoall [--json] [--transport T] [--iterations N] [--max-size BYTES_PER_PAIR]
 *   bench bcast|allreduce [--json] [--transport T] [--iterations N] --sizes B,B,...
 *   bench ring [--json] [--transport T] [--iterations N] --sizes B,B,...
 *
 * Sizes, round counts, windows and budgets follow crates/bench/src:
 * pingpong: 0, 8, 64, 256, ... (x4) up to max, median half round trip after
 * a tenth as many warm-up round trips; bw (as OSU's osu_bw): a window of
 * non-blocking sends (at most 64 MiB), then a 0-byte acknowledgement, one
 * window to warm up.
 *
 * --transport names what mpirun was told to carry the messages over (`tcp`,
 * the default, or `shm`): the rows of pingpong, bw and alltoall say it in
 * `what` (`tcp`; `tcp, MPI_Alltoall`), as bulkwire's rows say theirs;
 * those of bcast and allreduce in `transport`, their `what` naming the call.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW_BYTES (64L << 20)
#define BW_BUDGET (512L << 20)
#define PP_BUDGET (256L << 20)
/* Bytes each process sends per size in the ring's timed repetitions, beyond
   which there are fewer, and the fewest (crates/bench/src/put.rs). */
#define RING_BUDGET (2L << 30)
#define RING_LEAST 3
/* The largest message of the ring: MPI counts are ints. */
#define RING_PIECE (1L << 30)

/* --min-size: the sweep's sizes below it are left out. */
static long min_size = 0;

static int sizes(long first, long max, long *out) {
    int n = 0;
    out[n++] = first;
    if (max >= 8 && first < 8) out[n++] = 8;
    for (long x = 64; x <= max; x *= 4) out[n++] = x;
    if (out[n - 1] != max && max > 8) out[n++] = max;
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (out[i] >= min_size) out[kept++] = out[i];
    return kept;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long clampl(long x, long lo, long hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The transport named by --transport, and as a table says it. */
static const char *transport = "tcp";
static const char *over(void) { return strcmp(transport, "shm") ? "TCP" : "shared memory"; }

static void pingpong(int me, long iterations, long max, int json) {
    long list[64];
    int count = sizes(0, max, list);
    char *buf = malloc(max > 0 ? max : 1);
    memset(buf, 7, max > 0 ? max : 1);
    if (me == 0) {
        if (json) printf("[\n");
        else {
            printf("# half round trip, median, microseconds; Open MPI over %s, 2 ranks on this machine\n", over());
            printf("%9s %12s\n", "size", "openmpi");
        }
    }
    for (int s = 0; s < count; s++) {
        long size = list[s];
        long n = iterations < PP_BUDGET / (size > 0 ? size : 1) ? iterations : PP_BUDGET / (size > 0 ? size : 1);
        if (n < 10) n = 10;
        long warm = n / 10;
        double *samples = malloc(sizeof(double) * (n + warm));
        MPI_Barrier(MPI_COMM_WORLD);
        for (long i = 0; i < n + warm; i++) {
            double t = MPI_Wtime();
            if (me == 0) {
                MPI_Send(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
            samples[i] = MPI_Wtime() - t;
        }
        qsort(samples + warm, n, sizeof(double), cmp);
        double half_us = samples[warm + n / 2] / 2.0 * 1e6;
        if (me == 0) {
            if (json)
                printf("  {\"bench\": \"pingpong\", \"source\": \"mpi\", \"what\": \"%s\", \"procs\": 2, "
                       "\"size_bytes\": %ld, \"median_us\": %.3f}%s\n",
                       transport, size, half_us, s + 1 < count ? "," : "");
            else printf("%9ld %12.2f\n", size, half_us);
        }
        free(samples);
    }
    if (me == 0 && json) printf("]\n");
    free(buf);
}

static void bw(int me, long iterations, long max, long window_arg, int json) {
    long list[64];
    int count = sizes(1, max, list);
    char *buf = malloc(max);
    memset(buf, 7, max);
    MPI_Request *requests = malloc(sizeof(MPI_Request) * (window_arg > 0 ? window_arg : 1));
    if (me == 0) {
        if (json) printf("[\n");
        else {
            printf("# streaming throughput, MB/s (10^6 B/s); Open MPI over %s, 2 ranks on this machine; a window "
                   "of up to %ld messages (at most %ld MiB) in flight, then an acknowledgement\n",
                   over(), window_arg, WINDOW_BYTES >> 20);
            printf("%9s %12s\n", "size", "openmpi");
        }
    }
    for (int s = 0; s < count; s++) {
        long size = list[s];
        long window = clampl(window_arg, 1, WINDOW_BYTES / size > 1 ? WINDOW_BYTES / size : 1);
        long windows = iterations < BW_BUDGET / (size * window) ? iterations : BW_BUDGET / (size * window);
        if (windows < 2) windows = 2;
        double start = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (long round = 0; round < windows + 1; round++) {
            if (round == 1) start = MPI_Wtime();
            if (me == 0) {
                for (long w = 0; w < window; w++)
                    MPI_Isend(buf, (int)size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &requests[w]);
                MPI_Waitall((int)window, requests, MPI_STATUSES_IGNORE);
                MPI_Recv(NULL, 0, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (long w = 0; w < window; w++)
                    MPI_Irecv(buf, (int)size, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &requests[w]);
                MPI_Waitall((int)window, requests, MPI_STATUSES_IGNORE);
                MPI_Send(NULL, 0, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
            }
        }
        double seconds = MPI_Wtime() - start;
        double mb_s = (double)size * window * windows / seconds / 1e6;
        if (me == 0) {
            if (json)
                printf("  {\"bench\": \"bw\", \"source\": \"mpi\", \"what\": \"%s\", \"procs\": 2, "
                       "\"size_bytes\": %ld, \"mb_per_s\": %.3f, \"window_messages\": %ld, \"windows_count\": %ld}%s\n",
                       transport, size, mb_s, window, windows, s + 1 < count ? "," : "");
            else printf("%9ld %12.2f\n", size, mb_s);
        }
    }
    if (me == 0 && json) printf("]\n");
    free(requests);
    free(buf);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over `reps` of the slowest process's time, in microseconds. */
static double median_us(double *times, long reps) {
    qsort(times, (size_t)reps, sizeof *times, by_value);
    return times[reps / 2] * 1e6;
}

/* Process 0's time per operation over `reps` of them back to back (an
   alltoall of `size` bytes per pair, or with no `out` a barrier), all
   starting after a barrier: the mean, in microseconds. */
static double back_to_back_us(long reps, char *out, char *in, long size) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (long r = 0; r < reps; r++) {
        if (out) MPI_Alltoall(out, (int)size, MPI_BYTE, in, (int)size, MPI_BYTE, MPI_COMM_WORLD);
        else MPI_Barrier(MPI_COMM_WORLD);
    }
    double us = (MPI_Wtime() - t) / (double)reps * 1e6;
    MPI_Bcast(&us, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return us;
}

/* The references of `bulkwire bench total-exchange`: an empty barrier and a
   total exchange of `size` bytes per pair, each timed as the slowest
   process's time, median over `reps` after a few to warm up; then each
   `reps` times back to back, as the mean time per operation (what a BSP
   program's supersteps in a row cost, and steadier than the median where
   processes share cores). */
static void alltoall(int me, int procs, long reps, long size, int json) {
    char *out = calloc((size_t)procs, (size_t)size), *in = calloc((size_t)procs, (size_t)size);
    double *barrier = calloc((size_t)reps, sizeof(double)), *exchange = calloc((size_t)reps, sizeof(double));
    if (!out || !in || !barrier || !exchange) MPI_Abort(MPI_COMM_WORLD, 1);
    /* A job's first operations are slower where processes share cores; as
       `bulkwire bench total-exchange` does, 1,000 barriers warm it up. */
    for (int w = 0; w < 1000; w++) MPI_Barrier(MPI_COMM_WORLD);
    for (long r = -3; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        double mine = MPI_Wtime() - t, slowest;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (r >= 0) barrier[r] = slowest;
        MPI_Barrier(MPI_COMM_WORLD);
        t = MPI_Wtime();
        MPI_Alltoall(out, (int)size, MPI_BYTE, in, (int)size, MPI_BYTE, MPI_COMM_WORLD);
        mine = MPI_Wtime() - t;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (r >= 0) exchange[r] = slowest;
    }
    double b_mean = back_to_back_us(reps, NULL, NULL, size), x_mean = back_to_back_us(reps, out, in, size);
    if (me == 0) {
        double b = median_us(barrier, reps), x = median_us(exchange, reps);
        if (json)
            printf("[\n  {\"bench\": \"total-exchange\", \"source\": \"mpi\", \"what\": \"%s, MPI_Barrier\", "
                   "\"procs\": %d, \"size_bytes\": %ld, \"median_us\": %.2f, \"mean_us\": %.2f},\n"
                   "  {\"bench\": \"total-exchange\", \"source\": \"mpi\", \"what\": \"%s, MPI_Alltoall\", "
                   "\"procs\": %d, \"size_bytes\": %ld, \"median_us\": %.2f, \"mean_us\": %.2f}\n]\n",
                   transport, procs, size, b, b_mean, transport, procs, size, x, x_mean);
        else {
            printf("# Open MPI over %s: %d processes, %ld bytes per pair; median of %ld (slowest process, each "
                   "started by a barrier), mean of %ld back to back\n",
                   over(), procs, size, reps, reps);
            printf("%-24s %12s %12s\n", "", "median us", "mean us");
            printf("%-24s %12.1f %12.1f\n%-24s %12.1f %12.1f\n", "MPI_Barrier", b, b_mean, "MPI_Alltoall", x, x_mean);
        }
    }
    free(out);
    free(in);
    free(barrier);
    free(exchange);
}

/* The references of `bulkwire bench bcast` and `bench allreduce`:
   MPI_Bcast from process 0 of `size` bytes, or MPI_Allreduce (MPI_SUM) of
   size / 8 doubles, each timed as the slowest process's time, median over
   `reps` after a tenth as many (at least two) to warm up, each started by
   a barrier; the job first makes 1,000 barriers, as bulkwire's does. */
static void collective(int me, int procs, long reps, const char *list, int allreduce, int json) {
    long sizes[64];
    int count = 0;
    for (const char *p = list; *p && count < 64;) {
        sizes[count++] = atol(p);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    double *times = calloc((size_t)reps, sizeof(double));
    if (!times) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int w = 0; w < 1000; w++) MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0 && json) printf("[\n");
    for (int k = 0; k < count; k++) {
        long size = sizes[k] < 8 && allreduce ? 8 : sizes[k];
        double *out = calloc((size_t)size / 8 + 1, 8), *in = calloc((size_t)size / 8 + 1, 8);
        char *buf = calloc((size_t)size + 1, 1);
        if (!out || !in || !buf) MPI_Abort(MPI_COMM_WORLD, 1);
        long warm = reps / 10 < 2 ? 2 : reps / 10;
        for (long r = -warm; r < reps; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            if (allreduce) MPI_Allreduce(out, in, (int)(size / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            else MPI_Bcast(buf, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
            double mine = MPI_Wtime() - t, slowest;
            MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (r >= 0) times[r] = slowest;
        }
        if (me == 0) {
            double m = median_us(times, reps);
            const char *bench = allreduce ? "allreduce" : "bcast";
            const char *what = allreduce ? "MPI_Allreduce" : "MPI_Bcast";
            if (json)
                printf("  {\"bench\": \"%s\", \"source\": \"mpi\", \"what\": \"%s\", \"transport\": \"%s\", "
                       "\"procs\": %d, \"size_bytes\": %ld, \"median_us\": %.2f}%s\n",
                       bench, what, transport, procs, size, m, k + 1 < count ? "," : "");
            else printf("%-16s %-14s %12ld %12.1f\n", what, over(), size, m);
        }
        free(out);
        free(in);
        free(buf);
    }
    if (me == 0 && json) printf("]\n");
    free(times);
}

/* The 8 bytes that open and close the ring's data of one repetition. */
static uint64_t ring_stamp(int sender, long rep) {
    return 0x52494e47ULL << 32 | (uint64_t)(rep & 0xffff) << 16 | (uint64_t)(sender & 0xffff);
}

/* What `sender` puts at byte `i` of `size` bytes in repetition `rep`. */
static unsigned char ring_byte(int sender, long rep, long size, long i) {
    uint64_t s = ring_stamp(sender, rep);
    long n = size < 8 ? size : 8;
    if (i >= size - n) return (unsigned char)(s >> (8 * (i - (size - n))));
    if (i < n) return (unsigned char)(s >> (8 * i));
    return (unsigned char)((uint64_t)i * 2654435761u >> 13 ^ (uint64_t)sender * 131);
}

/* The reference of `bulkwire bench put`: every process sends `size` bytes
   to its right neighbour ((me + 1) mod procs) and receives as many from its
   left with MPI_Isend, MPI_Irecv and MPI_Waitall (in pieces of at most
   1 GiB), each repetition started by a barrier and timed as the slowest
   process's time; the median over the repetitions (fewer for large sizes)
   after one to warm up. The receiver checks the stamps that open and
   close every repetition's data and positions sampled between them; a
   wrong byte aborts the job. */
static void ring(int me, int procs, long iterations, const char *list, int json) {
    long sizes[64];
    int count = 0;
    for (const char *p = list; *p && count < 64;) {
        sizes[count++] = atol(p);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    long max = 1;
    for (int k = 0; k < count; k++) {
        if (sizes[k] < 1) {
            if (me == 0) fprintf(stderr, "bench ring: sizes must be at least 1 byte\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (sizes[k] > max) max = sizes[k];
    }
    int right = (me + 1) % procs, left = (me + procs - 1) % procs;
    unsigned char *out = malloc((size_t)max), *in = malloc((size_t)max);
    long pieces_max = (max + RING_PIECE - 1) / RING_PIECE;
    MPI_Request *requests = malloc(sizeof(MPI_Request) * 2 * (size_t)pieces_max);
    double *times = malloc(sizeof(double) * (size_t)iterations);
    if (!out || !in || !requests || !times) MPI_Abort(MPI_COMM_WORLD, 1);
    if (me == 0) {
        if (json) printf("[\n");
        else printf("# ring: %d processes, each sends to its right neighbour; Open MPI over %s\n%12s %12s %12s\n",
                    procs, over(), "size", "median us", "MB/s");
    }
    for (int k = 0; k < count; k++) {
        long size = sizes[k], reps = RING_BUDGET / size > RING_LEAST ? RING_BUDGET / size : RING_LEAST;
        if (reps > iterations) reps = iterations;
        long pieces = (size + RING_PIECE - 1) / RING_PIECE;
        for (long i = 0; i < size; i++) out[i] = ring_byte(me, -1, size, i);
        for (long r = -1; r < reps; r++) {
            uint64_t s = ring_stamp(me, r);
            long n = size < 8 ? size : 8;
            /* The closing stamp last: it wins where the two overlap. */
            for (long i = 0; i < n; i++) out[i] = (unsigned char)(s >> (8 * i));
            for (long i = 0; i < n; i++) out[size - n + i] = (unsigned char)(s >> (8 * i));
            long samples[8 + 8 + 61], m = 0;
            for (long i = 0; i < n; i++) samples[m++] = i, samples[m++] = size - n + i;
            for (long j = 1; j <= 61; j++) samples[m++] = j * (size - 1) / 62;
            for (long j = 0; j < m; j++) in[samples[j]] = (unsigned char)~ring_byte(left, r, size, samples[j]);
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            for (long p = 0; p < pieces; p++) {
                long at = p * RING_PIECE, len = size - at < RING_PIECE ? size - at : RING_PIECE;
                MPI_Irecv(in + at, (int)len, MPI_BYTE, left, 4, MPI_COMM_WORLD, &requests[2 * p]);
                MPI_Isend(out + at, (int)len, MPI_BYTE, right, 4, MPI_COMM_WORLD, &requests[2 * p + 1]);
            }
            MPI_Waitall((int)(2 * pieces), requests, MPI_STATUSES_IGNORE);
            double mine = MPI_Wtime() - t, slowest;
            for (long j = 0; j < m; j++) {
                long i = samples[j];
                if (in[i] != ring_byte(left, r, size, i)) {
                    fprintf(stderr, "bench ring: process %d: the %ld bytes from process %d (repetition %ld) arrived "
                                    "wrong: byte %ld is 0x%02x, expected 0x%02x\n",
                            me, size, left, r, i, in[i], ring_byte(left, r, size, i));
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            }
            MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (r >= 0) times[r] = slowest;
        }
        if (me == 0) {
            double m = median_us(times, reps), mb_s = (double)size / m;
            if (json)
                printf("  {\"bench\": \"put\", \"source\": \"mpi\", \"what\": \"%s, Isend/Irecv ring\", \"procs\": %d, "
                       "\"size_bytes\": %ld, \"mb_per_s\": %.3f, \"median_us\": %.2f, \"repetitions_count\": %ld}%s\n",
                       transport, procs, size, mb_s, m, reps, k + 1 < count ? "," : "");
            else printf("%12ld %12.1f %12.1f\n", size, m, mb_s);
        }
    }
    if (me == 0 && json) printf("]\n");
    free(out);
    free(in);
    free(requests);
    free(times);
}

/* SplitMix64, as crates/bench/src/solver.rs draws the solver's system. */
static uint64_t splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double unit(uint64_t *state) { return (double)(splitmix(state) >> 11) / (double)(1ULL << 53); }

/* Seed 003's solver, synchronously: A x + b = 0 (the system of `bench
 * solver`, drawn alike), Jacobi by rows, each sweep's rows shared by
 * MPI_Allgatherv and its largest change by MPI_Allreduce. */
static void solver(int me, int procs, long n, double tol, double dominance, uint64_t seed, double load, int json) {
    double *answer = malloc((size_t)n * sizeof(double)), *x = calloc((size_t)n, sizeof(double));
    int *counts = malloc((size_t)procs * sizeof(int)), *offsets = malloc((size_t)procs * sizeof(int));
    if (!answer || !x || !counts || !offsets) MPI_Abort(MPI_COMM_WORLD, 1);
    uint64_t s = seed;
    for (long i = 0; i < n; i++) answer[i] = 2.0 * unit(&s) - 1.0;
    for (int p = 0; p < procs; p++) {
        offsets[p] = (int)(n * p / procs);
        counts[p] = (int)(n * (p + 1) / procs) - offsets[p];
    }
    long lo = offsets[me], rows = counts[me];
    double *a = malloc((size_t)(rows * n) * sizeof(double)), *b = malloc((size_t)rows * sizeof(double));
    double *mine = malloc((size_t)(rows ? rows : 1) * sizeof(double));
    if (!a || !b || !mine) MPI_Abort(MPI_COMM_WORLD, 1);
    for (long i = lo; i < lo + rows; i++) {
        double *row = a + (i - lo) * n, off = 0;
        uint64_t r = seed ^ ((uint64_t)(i + 1) << 20);
        for (long j = 0; j < n; j++) {
            row[j] = 0;
            if (j != i) {
                row[j] = unit(&r);
                off += fabs(row[j]);
            }
        }
        row[i] = dominance * off;
        double dot = 0;
        for (long j = 0; j < n; j++) dot += row[j] * answer[j];
        b[i - lo] = -dot;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime(), change;
    long sweeps = 0;
    do {
        double local = 0;
        for (long i = lo; i < lo + rows; i++) {
            const double *row = a + (i - lo) * n;
            double dot = 0;
            for (long j = 0; j < n; j++) dot += row[j] * x[j];
            dot -= row[i] * x[i];
            double v = -(b[i - lo] + dot) / row[i];
            if (fabs(v - x[i]) > local) local = fabs(v - x[i]);
            mine[i - lo] = v;
        }
        MPI_Allgatherv(mine, (int)rows, MPI_DOUBLE, x, counts, offsets, MPI_DOUBLE, MPI_COMM_WORLD);
        MPI_Allreduce(&local, &change, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        sweeps++;
    } while (change >= tol);
    double seconds = MPI_Wtime() - start, error = 0;
    for (long i = 0; i < n; i++)
        if (fabs(x[i] - answer[i]) > error) error = fabs(x[i] - answer[i]);
    if (error > 100 * tol) {
        if (me == 0) fprintf(stderr, "bench solver: the answer is off by %g\n", error);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (me == 0) {
        char at[64] = "";
        if (load >= 0) snprintf(at, sizeof at, ", \"load\": %g", load);
        if (json)
            printf("[\n  {\"bench\": \"solver\", \"source\": \"mpi\", \"what\": \"mpi\", \"procs\": %d, "
                   "\"size_bytes\": %ld%s, \"seconds\": %.6f, \"iterations\": %ld, \"error\": %g}\n]\n",
                   procs, n, at, seconds, sweeps, error);
        else printf("solver: %ld equations, %d processes: %.3f s, %ld sweeps, error %g\n", n, procs, seconds, sweeps, error);
    }
    free(answer);
    free(x);
    free(counts);
    free(offsets);
    free(a);
    free(b);
    free(mine);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *which = argc > 1 ? argv[1] : "";
    int json = 0;
    long iterations = -1, max = 4L << 20, window = 64;
    const char *list = "8";
    long n = 1000;
    double tol = 1e-9, dominance = 1.1, load = -1;
    uint64_t seed = 3;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--transport") && i + 1 < argc) transport = argv[++i];
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--tolerance") && i + 1 < argc) tol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--dominance") && i + 1 < argc) dominance = atof(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--load") && i + 1 < argc) load = atof(argv[++i]);
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = atol(argv[++i]);
        else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) max = atol(argv[++i]);
        else if (!strcmp(argv[i], "--min-size") && i + 1 < argc) min_size = atol(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc) window = atol(argv[++i]);
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) list = argv[++i];
        else {
            if (me == 0) fprintf(stderr, "bench: unknown argument %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (!strcmp(which, "alltoall")) {
        /* --max-size is the bytes per pair here, --iterations the repetitions. */
        alltoall(me, size, iterations > 0 ? iterations : 20, max == 4L << 20 ? 16384 : max, json);
        MPI_Finalize();
        return 0;
    }
    if (!strcmp(which, "solver")) {
        if (n < size || !(dominance > 1) || !(tol > 0)) {
            if (me == 0) fprintf(stderr, "bench solver: need --size of at least the processes, --dominance above 1, --tolerance above 0\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        solver(me, size, n, tol, dominance, seed, load, json);
        MPI_Finalize();
        return 0;
    }
    if (!strcmp(which, "ring")) {
        ring(me, size, iterations > 0 ? iterations : 10, list, json);
        MPI_Finalize();
        return 0;
    }
    if (!strcmp(which, "bcast") || !strcmp(which, "allreduce")) {
        collective(me, size, iterations > 0 ? iterations : 30, list, !strcmp(which, "allreduce"), json);
        MPI_Finalize();
        return 0;
    }
    if (size != 2 || max < 1 || window < 1 || min_size > max || (strcmp(which, "pingpong") && strcmp(which, "bw"))) {
        if (me == 0)
            fprintf(stderr, "usage: mpirun -np 2 bench pingpong|bw [--json] [--transport T] [--iterations N] "
                            "[--min-size B] [--max-size B] [--window W]\n       mpirun -np P bench alltoall [--json] "
                            "[--transport T] [--iterations N] [--max-size B]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (!strcmp(which, "pingpong")) pingpong(me, iterations > 0 ? iterations : 2000, max, json);
    else bw(me, iterations > 0 ? iterations : 100, max, window, json);
    MPI_Finalize();
    return 0;
}
