/* housekeep.h - the daemon's cache collector thread (housekeep.c). */
#ifndef MFS_HOUSEKEEP_H
#define MFS_HOUSEKEEP_H

struct cache;
struct cache_policy;

/* Starts the thread: one round now, then one every interval_s seconds.
 * p is copied.  0 or a negative errno. */
int housekeep_start(struct cache *c, const struct cache_policy *p, int interval_s);
/* Stops it (waits for a round in progress); a no-op when not started. */
void housekeep_stop(void);

#endif
