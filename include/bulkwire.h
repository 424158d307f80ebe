/*
 * bulkwire.h: bulkwire's groups and collectives (seed 004) and shared
 * memory (seed 003) for C and C++ programs, in libbsp beside BSPlib. They
 * run over the runtime of the BSP section, between bsp_begin and bsp_end:
 * a BSPlib program uses them
 * as they are, any other C program opens a section for them
 * (bsp_begin(bsp_nprocs()) ... bsp_end()). Compile with `bspcc`, run with
 * `bulkwire run -n P prog`.
 *
 * Groups are named and dynamic: any process creates one (it and the listed
 * members are in its first view), joins one by name, leaves it or destroys
 * it; every member sees the same sequence of views. A group is an int
 * handle; bw_group_world() is the group of every process. Ranks are the
 * job's (bsp_pid()); a collective is called by every member of the group's
 * current view, with buffers of the same size.
 *
 * Every call returns 0 (or the value it names) on success, -1 on an error,
 * whose message bw_error() returns (the same messages as the Rust API:
 * the call, the group, and what was wrong). A collective pending when the
 * group's view changes ends with an error naming the change.
 */
#ifndef BULKWIRE_H
#define BULKWIRE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types and operations of bw_reduce and bw_allreduce. */
typedef enum { BW_INT32 = 0, BW_UINT32 = 1, BW_INT64 = 2, BW_UINT64 = 3, BW_FLOAT = 4, BW_DOUBLE = 5 } bw_type;
typedef enum { BW_SUM = 0, BW_PROD = 1, BW_MIN = 2, BW_MAX = 3 } bw_op;

/* The message of this thread's last error ("" if none). */
const char *bw_error(void);

/* Groups. create, join and find return the group's handle. */
int bw_group_world(void);
int bw_group_create(const char *name, const int *members, int count); /* this process and `members` */
int bw_group_join(const char *name);
int bw_group_find(const char *name);   /* waits until this process is in a group of that name */
int bw_group_leave(int group);
int bw_group_destroy(int group);
int bw_group_size(int group);          /* members in this process's view */
int bw_group_position(int group);      /* this process's place in the member list */
int bw_group_wait_members(int group, int count);
/* "bcast", "reduce", "allreduce", "gather", "scatter", "allgather" and
   "flat", "tree", "binomial", "chain", "scatter-allgather", "ring"; a null
   algorithm restores the automatic choice. */
int bw_group_set_algorithm(int group, const char *collective, const char *algorithm);
/* Non-zero: a broadcast's root returns once every member has the data,
   acknowledgements merged up the tree. */
int bw_group_set_confirmed(int group, int confirmed);
/* Non-zero: latest-value mode for the group's posts, for data of which only
   the newest value counts: a post not yet received is replaced by a newer
   one of the same poster and tag. */
int bw_group_set_latest_only(int group, int on);
/* Non-zero: best-effort mode for the posts this process makes and passes
   on: each hop sends a post once, with no acknowledgement or resending, so
   a post lost on the network stays lost (nothing is lost between processes
   of one host). */
int bw_group_set_best_effort(int group, int on);

/* Collectives. */
int bw_bcast(int group, int root, void *buf, size_t len);
int bw_reduce(int group, int root, void *buf, size_t count, bw_type type, bw_op op); /* result at root */
int bw_allreduce(int group, void *buf, size_t count, bw_type type, bw_op op);
int bw_gather(int group, int root, const void *send, size_t len, void *recv);  /* recv: size * len at root */
int bw_scatter(int group, int root, const void *send, void *recv, size_t len); /* send: size * len at root */
int bw_allgather(int group, const void *send, size_t len, void *recv);        /* recv: size * len */
int bw_barrier(int group);

/* Posts: to every other member, no common root (NCS_mcast); received like
   messages. bw_recv waits for a post from `source` (-1: any) with `tag`
   (-1: any), copies at most `capacity` bytes into buf and returns the
   post's length; `from` and `tag_out` may be null. */
int bw_post(int group, int tag, const void *data, size_t len);
int bw_recv(int group, int source, int tag, void *buf, size_t capacity, int *from, int *tag_out);

/*
 * Shared memory (seed 003's Mermera): segments of numbers replicated at
 * every process, read locally, written with one of three semantics:
 *   BW_SLOW      a writer's writes to one location are seen in order (a
 *                later one may replace an earlier one not yet sent);
 *   BW_PRAM      all of a writer's writes are seen by everyone in order;
 *   BW_COHERENT  all coherent writes are seen in one order by everyone;
 *                the call returns once its write has its place there.
 * Writes of different kinds are ordered only by bw_fence, which is
 * collective and returns once every write issued anywhere before it is
 * visible here. Every process maps the same segments in the same order,
 * with the same sizes and types. BULKWIRE_DSM_FLUSH=warp (the default) or
 * a number of writes chooses when the writes waiting in a process's buffer
 * are sent. The full semantics: crates/dsm/src/lib.rs.
 */
typedef enum { BW_SLOW = 0, BW_PRAM = 1, BW_COHERENT = 2 } bw_semantics;

int bw_seg_map(const char *name, bw_type type, size_t count);  /* returns the segment's handle */
int bw_seg_write(int seg, size_t start, const void *values, size_t count, bw_semantics sem);
int bw_seg_read(int seg, size_t start, void *values, size_t count);
int bw_fence(void);
int bw_flush(void);  /* sends this process's waiting writes now */

#ifdef __cplusplus
}
#endif

#endif
