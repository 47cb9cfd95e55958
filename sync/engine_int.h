/* engine_int.h - the sync engine's state, shared by engine.c (threads,
 * pull, prefetch) and cycle.c (one full sync of a store).  Not for use
 * outside sync/. */
#ifndef MFS_SYNC_ENGINE_INT_H
#define MFS_SYNC_ENGINE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "api.h"
#include "cache.h"
#include "engine.h"
#include "reconcile.h"

/* A version id read from the feed, and its created_at. */
struct feed_seen {
    char id[CACHE_ID_MAX];
    int64_t at_ns;
};

/* What a store's sync knows of its version feed (feed.c). */
struct feed {
    bool ready;          /* a watermark exists (a full listing read the head) */
    bool unsupported;    /* the server has no feed: full listings only */
    int failures;        /* reads failed in a row */
    int64_t mark_ns;     /* the newest created_at applied (server clock) */
    struct feed_seen *seen; /* versions read at or after mark - overlap, by id */
    size_t n_seen;
    int64_t last_full_s; /* CLOCK_MONOTONIC seconds of the last full listing */
    int64_t last_read_s; /* ... and of the last read applied (listing or feed) */
    bool want_full;      /* an upload met a newer version (409) the feed may have
                          * named while its file was not decided (held, refused):
                          * the feed will not name it again; the next sync lists */
    struct api_list extra; /* memories the feed named that the cache has not taken */
};

/* One read of the feed, applied by the sync that asked for it. */
struct feed_read {
    bool ok;             /* a read (or head) to commit once applied */
    bool untrusted;      /* the feed cannot settle this sync: list the store */
    const char *why;     /* ...and why (static) */
    struct api_list changes; /* memories now at (path, hash), not yet the baseline */
    char **gone;         /* memories deleted */
    size_t n_gone;
    int64_t mark_ns;     /* the watermark once applied */
    struct feed_seen *seen;
    size_t n_seen;
};

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
    /* Non-zero: the requests of this store's rounds (periodic, prefetch,
     * sync --wait) end at once; CANCEL_OFF is syncer_cancel's bit,
     * CANCEL_FINAL says a final sync waits for the store (syncer_sync). */
    volatile int cancel;
    volatile int final_cancel; /* syncer_cancel: the final sync's requests end */
    bool progress;       /* syncer_refresh: report the listing's pages */
    struct feed feed;    /* the version feed (feed.c) */
    size_t known;        /* memories in the last listing or view */
    bool content_missing; /* a prefetch may have something to download */
    bool backlog;        /* the last sync left work for the next round: dirty
                          * files past its slice, content not fetched yet */
    /* Guarded by syncer.lock: */
    int64_t last;
    char result[512];
    struct syncer_report rep;
    struct syncer_report done; /* pushed, deleted, conflicts: summed over every
                                * round so far (syncer_sync_now's report) */
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
    struct timespec deferred; /* guarded by lock: no periodic sync before this
                               * (CLOCK_MONOTONIC; a sync asked for by hand) */
    unsigned fetching;        /* guarded by lock: syncer_fetch downloads running */
    pthread_cond_t fetch_free; /* signalled when one of those ends */
};

/* feed.c: change detection from the version feed. */
/* Whether this sync may use the feed (a watermark, the endpoint, and no
 * full listing due: --full-resync). */
bool feed_usable(const struct syncer *s, const struct sstore *st, int64_t now_s);
/* Reads the changes since the watermark into fr.  memories (the store's
 * size) bounds the pages read; fr->untrusted when the feed cannot settle
 * the sync.  On failure why says why. */
int feed_read(struct syncer *s, struct sstore *st, size_t memories, struct feed_read *fr,
              char *why, size_t whylen);
/* The watermark before a full listing: the newest version (head->ok). */
int feed_head(struct syncer *s, struct sstore *st, struct feed_read *head);
/* Applies a successful read (or head) as the new watermark. */
void feed_commit(struct sstore *st, struct feed_read *fr);
/* The listing to decide against: the cache's baselines patched with fr
 * and the memories earlier reads could not place (api_list, owned). */
int feed_view(struct syncer *s, struct sstore *st, struct feed_read *fr, struct api_list *view);
/* After the apply of rl (a full listing, or the view feed_view built):
 * extra becomes what it could not place (the feed will not name those
 * again); what extra held before, rl held too.  Kept as it was when the
 * cache cannot be read. */
void feed_keep_listed_unplaced(struct syncer *s, struct sstore *st,
                               const struct cache_remote *rl, size_t nr);
void feed_read_free(struct feed_read *fr);
void feed_free(struct feed *fd);

/* engine.c */
void engine_set_result(struct syncer *s, struct sstore *st, const char *result,
                       const struct syncer_report *rep);
void engine_notify(struct sstore *st, const struct cache_changes *ch);
/* Downloads up to max (0: every) of the store's files whose bytes the cache
 * lacks; st->content_missing says whether any are left (or failed). */
int engine_prefetch(struct syncer *s, int idx, size_t max);
/* Stores fetched bytes; -ESTALE when they are not the bytes of want_sha
 * (NULL: any). */
int engine_keep_fetched(struct syncer *s, const struct api_memory *m, const char *want_sha);
/* How much of a backlog one round of a store takes before the next store's
 * turn: files pushed (content-only writes) and files downloaded. */
#define ENGINE_PUSH_SLICE 128
#define ENGINE_FETCH_SLICE 256
#define CANCEL_OFF 1   /* sstore.cancel: syncer_cancel */
#define CANCEL_FINAL 2 /* sstore.cancel: a final sync waits for the store */
struct api_list;
/* Lists the store into r[0..n) sorted by path; r points into list (free
 * r, then api_list_free(list)).  The server is not trusted: the marker path
 * is skipped; an item that is malformed, at a path that cannot be a file,
 * or that repeats a path or an id (the first by id, then path, wins) is
 * left out with one warning per mount, and a memory the cache knows that
 * is left out so is listed as its baseline (held as it is this sync)
 * rather than taken for deleted.  by_dir: list it by directory, several at
 * once (api_memories_list_tree), page by page if the server's answers do
 * not fit that; only where nothing local could be taken for deleted (a
 * store the cache holds nothing of). */
int engine_list(struct syncer *s, struct sstore *st, bool by_dir, struct api_list *list,
                struct cache_remote **r, size_t *n, char *why, size_t whylen);
/* The same filtering for a listing built otherwise (from the version
 * feed and the cache: feed.c).  On failure list is freed. */
int engine_filter(struct syncer *s, struct sstore *st, struct api_list *list,
                  struct cache_remote **r, size_t *n, char *why, size_t whylen);
/* cache_apply_remote + kernel notifications. */
int engine_apply(struct syncer *s, struct sstore *st, const struct cache_remote *r, size_t n,
                 char *why, size_t whylen);

/* cycle.c: one full sync of store idx (list, decide, pull, push).  final:
 * the last one before the writers go (unmount, flush): content a writer
 * still held open is pushed as it was last saved (enum cache_saved). */
/* One sync of store idx; its own report in *own (may be NULL): the
 * store's last report may already be a later sync's when it returns. */
int cycle_run(struct syncer *s, int idx, bool final, char *why, size_t whylen,
              struct syncer_report *own);
/* After the apply of a full listing r (sorted by path): whether a file
 * the apply left alone (dirty, held) has in it something else than its
 * baseline, which the version feed will not name again: the next sync
 * must list the store in full to decide it. */
bool cycle_listing_missed(struct syncer *s, struct sstore *st, const struct cache_remote *r,
                          size_t n);
/* True the first time (msg, key, key2) is seen for the life of the mount
 * (st->said, under st->said_lock): a standing warning is logged once. */
bool engine_first_time(struct sstore *st, const char *msg, const char *key, const char *key2);

#endif
