/* engine.h - the sync engine: keeps each store's cache in step with the
 * remote store and tells the kernel (through callbacks that fs/ registers)
 * what changed.  Never includes FUSE headers. */
#ifndef MFS_SYNC_ENGINE_H
#define MFS_SYNC_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;
struct http_client;
struct syncer;

/* Callbacks into fs/notify.c.  Rows are cache inode numbers.  Called from
 * the sync thread with no cache lock held. */
struct sync_notify {
    void *arg;
    void (*inval_inode)(void *arg, uint64_t row);
    void (*entry_new)(void *arg, uint64_t parent_row, const char *name);
    void (*entry_gone)(void *arg, uint64_t parent_row, uint64_t row, const char *name);
};

struct syncer_opts {
    int interval_s;      /* seconds between syncs of a store */
    int fetch_in_flight; /* content downloads in flight at once; 0 -> 8 */
};

/* The syncer borrows c and h; they must outlive it.  NULL on ENOMEM. */
struct syncer *syncer_new(struct cache *c, struct http_client *h, const struct syncer_opts *o);
/* Stops the thread if running and frees; NULLs *s. */
void syncer_free(struct syncer **s);

/* Registers a store (before syncer_start).  Returns its index (>= 0) or a
 * negative errno.  n is copied. */
int syncer_add(struct syncer *s, const char *store_id, bool read_only, const struct sync_notify *n);

/* Lists the store and brings the cache to it, notifying the kernel of what
 * changed.  On failure why gets a one-line reason. */
int syncer_refresh(struct syncer *s, int idx, char *why, size_t whylen);

/* Downloads the content of one memory into the cache (blocking).  0 when
 * the bytes of sha are in the cache afterwards. */
int syncer_fetch(struct syncer *s, int idx, const char *memory_id, const char *sha);

/* Background thread: prefetches missing content, then refreshes every
 * store every interval.  syncer_stop waits for it to finish its step. */
int syncer_start(struct syncer *s);
void syncer_stop(struct syncer *s);

/* Last sync time (unix seconds, 0 if none) and result ("ok" or a reason). */
void syncer_last(struct syncer *s, int idx, int64_t *when, char *result, size_t len);

#endif
