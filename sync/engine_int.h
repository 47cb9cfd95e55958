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

struct sstore {
    char *id;
    bool read_only;
    struct sync_notify n;
    /* Owned by whichever thread runs this store's sync (one at a time:
     * cycle_lock): */
    pthread_mutex_t cycle_lock;
    pthread_mutex_t said_lock; /* guards said, n_said (a leaf lock) */
    uint64_t *said;      /* hashes of standing messages already logged */
    size_t n_said;
    bool disabled;       /* unmounted: never synced again (under cycle_lock) */
    bool progress;       /* syncer_refresh: report the listing's pages */
    /* Guarded by syncer.lock: */
    int64_t last;
    char result[512];
    struct syncer_report rep;
    int64_t running_since;  /* a sync (cycle_run) started then; 0: none runs */
    int64_t failing_since;  /* first failure since the last success; 0: none */
    int64_t last_ok;        /* the last success; 0: none yet */
    char last_error[512];   /* the last failure's reason ("" after a success) */
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
/* Lists the store into r[0..n) sorted by path; r points into list (free
 * r, then api_list_free(list)).  The server is not trusted: the marker path
 * is skipped; an item that is malformed, at a path that cannot be a file,
 * or that repeats a path or an id (the first by id, then path, wins) is
 * left out with one warning per mount, and a memory the cache knows that
 * is left out so is listed as its baseline (held as it is this sync)
 * rather than taken for deleted. */
int engine_list(struct syncer *s, struct sstore *st, struct api_list *list,
                struct cache_remote **r, size_t *n, char *why, size_t whylen);
/* cache_apply_remote + kernel notifications. */
int engine_apply(struct syncer *s, struct sstore *st, const struct cache_remote *r, size_t n,
                 char *why, size_t whylen);

/* cycle.c: one full sync of store idx (list, decide, pull, push).  final:
 * the last one before the writers go (unmount, flush): content a writer
 * still held open is pushed as it was last saved (enum cache_saved). */
int cycle_run(struct syncer *s, int idx, bool final, char *why, size_t whylen);
/* True the first time (msg, key, key2) is seen for the life of the mount
 * (st->said, under st->said_lock): a standing warning is logged once. */
bool engine_first_time(struct sstore *st, const char *msg, const char *key, const char *key2);

#endif
