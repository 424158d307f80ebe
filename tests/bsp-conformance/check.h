/*
 * Shared by the conformance cases.
 *
 * A case checks its own results: a failed CHECK ends the job through
 * bsp_abort with "FAIL", the file, the line and the condition, so the runner
 * shows which check failed on which process. A passing case prints "ok"
 * exactly once (from process 0); the runner also counts it, which catches
 * processes that keep running past bsp_end when they should not.
 *
 * The header comment of each case says what the runner expects:
 *   expect: ok                       exit status 0 and one "ok" line
 *   expect: abort "word" "word" ...  a non-zero exit (not a signal) whose
 *                                    output contains every quoted word
 *   expect: signal "word" ...        a process killed by a signal (exit
 *                                    status 128 + n) and every quoted word
 *   procs: >=2 | 1 | 2 4 ...         the values of P the case applies to
 *   output: "text"                   stdout also contains text ({P} is P)
 *   stdin: "text"                    fed to the job's standard input
 *   args: a b c                      the program's arguments
 *   xfail: why                       a known gap of the library: the case
 *                                    runs, but its failure does not fail
 *                                    the suite
 *   orders: every                    also run in pid and random destination
 *                                    order, every byte after the barrier
 */
#ifndef CONFORMANCE_CHECK_H
#define CONFORMANCE_CHECK_H

#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond))                                                               \
            bsp_abort("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);              \
    } while (0)

/* Shows both values when two ints differ. */
#define CHECK_INT(got, want)                                                       \
    do {                                                                           \
        long long got_ = (long long)(got), want_ = (long long)(want);              \
        if (got_ != want_)                                                         \
            bsp_abort("FAIL %s:%d: %s is %lld, expected %lld\n", __FILE__,         \
                      __LINE__, #got, got_, want_);                                \
    } while (0)

/* The line a passing case prints, once, from process 0. */
static inline void pass(void)
{
    if (bsp_pid() == 0) {
        printf("ok\n");
        fflush(stdout);
    }
}

/* A deterministic value for element i on process pid, for filling buffers. */
static inline int value_of(int pid, int i)
{
    return pid * 100003 + i * 7 + 1;
}

#endif
