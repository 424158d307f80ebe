/*
 * mcbsp.h: MulticoreBSP for C programs include this name; the BSPlib part of
 * its interface is bulkwire's bsp.h (bsp_pid_t, bsp_nprocs_t and bsp_size_t
 * included). MulticoreBSP's own extensions (mcbsp_set_*, thread affinity)
 * have no meaning for processes started by bulkwire and are not provided.
 */
#ifndef BULKWIRE_MCBSP_H
#define BULKWIRE_MCBSP_H
#include "bsp.h"
#endif
