/* setupwatch.h - SIGTERM and SIGINT during the daemon's setup. */
#ifndef MFS_SETUPWATCH_H
#define MFS_SETUPWATCH_H

#include <stdbool.h>

struct http_client;

/* Starts watching (the signals must be blocked already); on a signal the
 * client *http (when made by then) cancels its requests.  0 or -errno. */
int setupwatch_start(struct http_client **http);
/* A signal came: the setup stops at its next step. */
bool setupwatch_fired(void);
/* Stops watching; the signal taken (SIGTERM, SIGINT) or 0. */
int setupwatch_stop(void);

#endif
