/* log_int.h - between log.c (line formatting) and logsink.c (the daemon's
 * log target).  Private to cache/. */
#ifndef MFS_LOG_INT_H
#define MFS_LOG_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "log.h"

/* log.c's out_lock, which serialises every write of a line. */
void log_lock(void);
void log_unlock(void);

/* Called by log.c under out_lock with a whole line (newline included);
 * body_off is where the part after the timestamp starts.  False when no
 * target is active (log.c then writes to its stream). */
bool logsink_write(enum log_level lvl, const char *line, size_t len, size_t body_off);

#endif
