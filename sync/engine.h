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
    /* The store won over row's content sha, which is kept as a conflict
     * record (before the store's version is applied); may be NULL. */
    void (*lost)(void *arg, uint64_t row, const char *sha);
    /* The files of the store open for writing: how many, their rows
     * in *rows (malloc'd, NULL when none; the caller frees); may be NULL. */
    size_t (*writing)(void *arg, uint64_t **rows);
    /* Has the kernel write the pages of row it holds dirty (a shared
     * writable mapping's, which no request has brought yet) into the
     * open file, before the sync decides about row: an edit they carry
     * is then a local edit as any other; may be NULL. */
    void (*settle_pages)(void *arg, uint64_t row);
};

enum syncer_deletions { SYNCER_DEL_ENABLED = 0, SYNCER_DEL_LOG_ONLY, SYNCER_DEL_DISABLED };

struct syncer_opts {
    int interval_s;      /* seconds between syncs of a store */
    int full_resync_s;   /* a full listing at least this often (0: never but
                          * when the version feed cannot be used) */
    enum syncer_deletions deletions;
    int fetch_timeout_s; /* bound of a syncer_fetch (0: none) */
    /* Called (may be NULL) after each page of the listing syncer_refresh
     * reads, on its thread: memories listed so far, and whether it was
     * the last page.  For a progress line on a terminal. */
    void (*progress)(void *arg, const char *store_id, size_t listed, bool last);
    void *progress_arg;
};

/* What the last sync of a store did and left. */
struct syncer_report {
    unsigned pushed;     /* creates and updates that reached the store */
    unsigned deleted;    /* remote deletes sent */
    unsigned conflicts;  /* store-wins resolutions */
    unsigned refused;    /* files the server refused (stay local) */
    unsigned held;       /* deletes held back by the per-sync cap */
    unsigned failed;     /* writes that failed and will be retried */
    unsigned pending;    /* local changes not on the server after the sync */
    unsigned kept_deletions; /* deletions this process may not send (their
                              * mode or its own: log_only, disabled) */
    unsigned unsaved;    /* new files no writer has closed yet: not pushed */
};

/* The syncer borrows c and h; they must outlive it.  NULL on ENOMEM. */
struct syncer *syncer_new(struct cache *c, struct http_client *h, const struct syncer_opts *o);
/* Stops the thread if running and frees; NULLs *s. */
void syncer_free(struct syncer **s);

/* Registers a store (before syncer_start).  Returns its index (>= 0) or a
 * negative errno.  n is copied. */
int syncer_add(struct syncer *s, const char *store_id, bool read_only, const struct sync_notify *n);

/* Holds off the syncs of store idx (its cycle lock, no HTTP under it)
 * for a local edit made outside the mount (a restore): made while held,
 * it is in the cache before the final sync starts, which then pushes it.
 * False (nothing held) once the store had its final sync: the edit would
 * stay unpushed.  Every true is matched by one syncer_release. */
bool syncer_hold(struct syncer *s, int idx);
void syncer_release(struct syncer *s, int idx);

/* The store is unmounted: waits for a sync of it in progress, then never
 * syncs it again (its host lock is about to be released, and another
 * daemon or `memstorefs flush` may take it). */
void syncer_disable(struct syncer *s, int idx);

/* Lists the store and brings the cache to it, notifying the kernel of what
 * changed.  On failure why gets a one-line reason. */
int syncer_refresh(struct syncer *s, int idx, char *why, size_t whylen);

/* Downloads the content of one memory into the cache (blocking).  0 when
 * the bytes of sha are in the cache afterwards.  At most FETCH_SLOTS run
 * at once; with queue false the call does not wait for a slot (a caller
 * holding directory locks: a rename).  Ended by deadline_ms (http_now_ms's
 * clock; 0: none), the wait for a slot, retries and a 429's pause
 * included: -ETIMEDOUT past it (a caller on the file system's request
 * path must not wait for as long as the server asks). */
int syncer_fetch(struct syncer *s, int idx, const char *memory_id, const char *sha, bool queue,
                 int64_t deadline_ms);
/* The deadline of a file operation's downloads, taken once at its start
 * so that its retries share it: fetch_timeout_s from now (0 when s is
 * NULL or has no bound). */
int64_t syncer_fetch_deadline(const struct syncer *s);
/* Whether deadline_ms (syncer_fetch_deadline; 0: none) has passed. */
bool syncer_past(int64_t deadline_ms);

/* Background thread: prefetches missing content, then syncs every store
 * at once and every interval after.  syncer_stop waits (bounded) for it
 * to finish its step.  syncer_kick makes it sync now. */
void syncer_kick(struct syncer *s);
int syncer_start(struct syncer *s);
void syncer_stop(struct syncer *s);

/* Last sync time (unix seconds, 0 if none) and result ("ok" or a reason). */
void syncer_last(struct syncer *s, int idx, int64_t *when, char *result, size_t len);
/* While on, the syncs of store idx (running or started) end their
 * requests with -ECANCELED; the other stores' go on.  What they did not
 * push stays dirty.  Bounds the final sync at unmount (fs/finalsync.c). */
void syncer_cancel(struct syncer *s, int idx, bool on);
/* Whether the last sync of store idx left a backlog for another round. */
bool syncer_backlog(struct syncer *s, int idx);
/* Whether the store's syncs keep up: for `memstorefs status`, which says
 * when a sync has been running, or failing, for longer than an interval
 * (a server that trickles bytes or hangs, a credential revoked, ...).
 * Times are unix seconds. */
struct syncer_health {
    int64_t running_since;  /* a sync of the store started then and is still
                             * running; 0 when none runs */
    int64_t failing_since;  /* the first failed sync since the last success;
                             * 0 when the last one succeeded (or none ended) */
    int64_t last_ok;        /* the last successful sync (or listing at mount) */
    char last_error[512];   /* the last failure's reason, "" since a success */
    int interval_s;         /* --sync-interval */
};
void syncer_health(struct syncer *s, int idx, struct syncer_health *h);

/* The report of the last full sync (zeroed if none yet). */
void syncer_last_report(struct syncer *s, int idx, struct syncer_report *rep);

/* A sync of store idx now, as a periodic one would run it (`memstorefs
 * sync`), on the caller's thread, serialised with the sync thread's; the
 * next periodic sync comes an interval after it.  rep (may be NULL)
 * receives its report: what is left is its own round's; what was
 * pushed, deleted and decided for the store counts the rounds that ended
 * while it waited for its turn as well.  Like a periodic sync it takes
 * one slice of a backlog: while syncer_backlog says so, the caller runs
 * it again (after the other stores' turns, for fairness). */
int syncer_sync_now(struct syncer *s, int idx, char *why, size_t whylen,
                    struct syncer_report *rep);

/* One full sync of store idx now (list, pull, push), on the caller's
 * thread, serialised with the sync thread's: the final one, which also
 * pushes content a writer still held open as it last saved it.  Used at
 * unmount (final sync) and by `memstorefs flush`.  rep (may be NULL)
 * receives the report. */
int syncer_sync(struct syncer *s, int idx, char *why, size_t whylen, struct syncer_report *rep);

#endif
