/* engine_int.h - the sync engine's state, shared by engine.c (threads,
 * pull, prefetch) and cycle.c (one full sync of a store).  Not for use
 * outside sync/. */
#ifndef MFS_SYNC_ENGINE_INT_H
#define MFS_SYNC_ENGINE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "engine.h"
#include "reconcile.h"

/* An upload whose answer was lost: the next listing settles it. */
struct sent {
    uint64_t ino;
    char sha[SHA256_HEX_LEN + 1];
};

struct sstore {
    char *id;
    bool read_only;
    struct sync_notify n;
    /* Owned by whichever thread runs this store's sync (one at a time:
     * cycle_lock): */
    pthread_mutex_t cycle_lock;
    struct sent *sent;
    size_t n_sent;
    uint64_t *said;      /* hashes of standing messages already logged */
    size_t n_said;
    bool disabled;       /* unmounted: never synced again (under cycle_lock) */
    bool progress;       /* syncer_refresh: report the listing's pages */
    /* Guarded by syncer.lock: */
    int64_t last;
    char result[512];
    struct syncer_report rep;
};

struct syncer {
    struct cache *c;
    struct http_client *h;
    struct syncer_opts o;
    struct sstore *v;
    size_t n;
    pthread_t thr;
    bool running;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;           /* guarded by lock */
    bool kick;           /* guarded by lock: sync now */
};

/* engine.c */
void engine_set_result(struct syncer *s, struct sstore *st, const char *result,
                       const struct syncer_report *rep);
void engine_notify(struct sstore *st, const struct cache_changes *ch);
int engine_prefetch(struct syncer *s, int idx);
struct api_list;
/* Lists the store (skipping the marker path and invalid paths, with a
 * warning) into r[0..n) sorted by path; r points into list.  Free r, then
 * api_list_free(list). */
int engine_list(struct syncer *s, struct sstore *st, struct api_list *list,
                struct cache_remote **r, size_t *n, char *why, size_t whylen);
/* cache_apply_remote + kernel notifications. */
int engine_apply(struct syncer *s, struct sstore *st, const struct cache_remote *r, size_t n,
                 char *why, size_t whylen);

/* cycle.c: one full sync of store idx (list, decide, pull, push). */
int cycle_run(struct syncer *s, int idx, char *why, size_t whylen);

#endif
