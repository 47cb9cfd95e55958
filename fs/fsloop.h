/* fsloop.h - the request loop of one mounted store (fsloop.c). */
#ifndef MEMSTOREFS_FSLOOP_H
#define MEMSTOREFS_FSLOOP_H

#include <stdint.h>

#include "fs.h"

/* Reads and runs the session's requests until it is unmounted or
 * exited, then waits for every request still running; 0, or the
 * negative errno of the device read that ended it.  fd: the device
 * descriptor it polls, the store's own (fuseio.c), which outlives the
 * session's.  *polls counts the polls of the device after an answer. */
int fsloop_run(struct fuse_session *se, int fd, uint64_t *polls);

/* Called by a request about to wait on the network: another thread
 * takes over reading requests meanwhile.  A no-op outside the loop. */
void fsloop_blocking(void);

#endif
