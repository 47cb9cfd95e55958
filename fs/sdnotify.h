/* sdnotify.h - readiness notification to systemd (sdnotify.c). */
#ifndef MFS_SDNOTIFY_H
#define MFS_SDNOTIFY_H

#include <stddef.h>

/* Reads (and unsets) NOTIFY_SOCKET; before any thread exists. */
void sdnotify_init(void);
/* Sends state ("READY=1\nSTATUS=...") when started by systemd; else nothing. */
void sdnotify(const char *state);

#endif
