/*
 * bsp.h: the BSPlib interface of bulkwire.
 *
 * The prototypes are those of the BSPlib standard (Hill, McColl, Stefanescu,
 * Goudreau, Lang, Rao, Suel, Tsantilas and Bisseling, 1997), with int sizes,
 * so that programs written for the Oxford BSP Toolset, BSPonMPI or
 * MulticoreBSP compile unchanged. Compile with `bspcc` and run with
 * `bulkwire run -n P prog` (or `bsprun -npes P prog`).
 *
 * Every misuse (a null pointer, a negative size, a pid out of range, a put
 * outside a registered area, ...) ends the whole job with a message naming
 * the process, the call and the reason.
 */
#ifndef BULKWIRE_BSP_H
#define BULKWIRE_BSP_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Types that BSPonMPI and MulticoreBSP programs use for pids, process counts
 * and sizes; all are int here, as in the standard. */
typedef int bsp_pid_t;
typedef int bsp_nprocs_t;
typedef int bsp_size_t;

/* Marks this as bulkwire's BSPlib, for programs that adapt to the library. */
#define BULKWIRE_BSPLIB 1

#if defined(__GNUC__) || defined(__clang__)
#define BULKWIRE_BSP_NORETURN __attribute__((noreturn))
#define BULKWIRE_BSP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BULKWIRE_BSP_NORETURN
#define BULKWIRE_BSP_PRINTF(f, a)
#endif

/* --- starting and ending the SPMD part --------------------------------- */

/* Starts the SPMD part with at most maxprocs processes. */
void bsp_begin(int maxprocs);
/* Ends the SPMD part; only process 0 returns when bsp_init was used. */
void bsp_end(void);
/* Records the SPMD function for programs whose main is not the SPMD part;
 * must come first in main. Processes other than 0 run spmd directly. */
void bsp_init(void (*spmd)(void), int argc, char **argv);

/* Ends every process of the job, printing the printf-style message. */
void bsp_abort(const char *format, ...) BULKWIRE_BSP_PRINTF(1, 2) BULKWIRE_BSP_NORETURN;
void bsp_vabort(const char *format, va_list args) BULKWIRE_BSP_NORETURN;

/* --- enquiry ------------------------------------------------------------ */

/* Processes in the SPMD part; before bsp_begin, the number available. */
int bsp_nprocs(void);
/* This process's number, 0 .. bsp_nprocs() - 1. */
int bsp_pid(void);
/* Seconds since bsp_begin on this process. */
double bsp_time(void);

/* --- superstep ---------------------------------------------------------- */

void bsp_sync(void);

/* --- direct remote memory access --------------------------------------- */

/* Collective: takes effect at the next bsp_sync, pushes and pops in the
 * order they were made; the most recent registration of an address wins. */
void bsp_push_reg(const void *ident, int size);
void bsp_pop_reg(const void *ident);

/* Copies src at the call; lands at dst + offset on pid at the sync. */
void bsp_put(int pid, const void *src, void *dst, int offset, int nbytes);
/* Like bsp_put, but src may be read at any time before the sync. */
void bsp_hpput(int pid, const void *src, void *dst, int offset, int nbytes);
/* Reads src + offset on pid at the end of the superstep, before any put lands. */
void bsp_get(int pid, const void *src, int offset, void *dst, int nbytes);
/* Like bsp_get, but may read and write at any time before the sync. */
void bsp_hpget(int pid, const void *src, int offset, void *dst, int nbytes);

/* --- bulk synchronous message passing ---------------------------------- */

/* Sets the tag size from the next superstep on. *tag_nbytes gets the size
 * that was pending for the next superstep: at the first call of a
 * superstep the size in effect, at a later call the size the previous call
 * asked for (as BSPonMPI). Collective: every process makes the same calls. */
void bsp_set_tagsize(int *tag_nbytes);
/* Queues a message for pid, delivered in the next superstep. */
void bsp_send(int pid, const void *tag, const void *payload, int payload_nbytes);
/* The queue's order: by sending process, lowest pid first, and each
 * process's messages in the order it sent them; the same under loss and for
 * every destination order of the sync (BULKWIRE_BSP_ORDER). */
/* Messages and payload bytes still in this superstep's queue. */
void bsp_qsize(int *nmessages, int *accum_nbytes);
/* Payload size of the first message (-1 if none) and its tag, at the tag
 * size in effect when it was sent (the last superstep's). */
void bsp_get_tag(int *status, void *tag);
/* Copies at most reception_nbytes of the first payload and dequeues it. */
void bsp_move(void *payload, int reception_nbytes);
/* Points at the first message's tag and payload in place, dequeues it and
 * returns the payload size; valid until the next bsp_sync. */
int bsp_hpmove(void **tag_ptr, void **payload_ptr);

#ifdef __cplusplus
}
#endif

#endif /* BULKWIRE_BSP_H */
