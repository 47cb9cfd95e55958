/* kwake.h - whether the kernel wakes the daemon where the request was
 * made (the fuse module's wake_here parameter; kwake.c). */
#ifndef MFS_KWAKE_H
#define MFS_KWAKE_H

#include <stdbool.h>
#include <stdint.h>

/* A boolean parameter of the fuse module, read now: 1 (Y), 0 (N, or a
 * file that cannot be read), or -1 when this kernel has no such parameter. */
int kwake_fuse_param(const char *name);

/* The parameter's value as last read: 1 (Y), 0 (N), or -1 when this
 * kernel has no such parameter.  Read again when the last reading is a
 * second old or more; now_us: CLOCK_MONOTONIC in microseconds. */
int kwake_state(int64_t now_us);

/* kwake_state(now_us) == 1: polling the device after an answer would only
 * keep the CPU from the process whose next request it waits for. */
static inline bool kwake_here(int64_t now_us)
{
    return kwake_state(now_us) == 1;
}

#endif
