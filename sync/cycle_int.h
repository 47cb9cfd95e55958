/* cycle_int.h - what the files of one sync of a store share: cycle.c (the
 * run: listing, settling lost uploads, apply, report), plan.c (deciding
 * each tombstone and dirty file) and push.c (sending the writes and
 * recording their results).  Not for use outside sync/. */
#ifndef MFS_SYNC_CYCLE_INT_H
#define MFS_SYNC_CYCLE_INT_H

#include "engine_int.h"

struct file {
    struct cnode n;
    char refused_sha[SHA256_HEX_LEN + 1];
    /* plan.c, before the files are decided: moved onto a path another
     * memory keeps (path_held); going back to where the store has its
     * memory this sync (stays: it moves nothing away). */
    bool path_held, stays;
};

struct files {
    struct file *v;
    size_t n, cap;
};

/* The listing, indexed by memory id and by path (both binary searched). */
struct remote {
    const struct cache_remote *by_path; /* sorted by path */
    const struct cache_remote **by_id;  /* sorted by memory_id */
    size_t n;
};

/* One pending write and what it is for. */
struct job {
    enum rec_action action;
    uint64_t ino;           /* 0 for a delete */
    char *path;             /* the path sent (create/update), or the tombstone's */
    char *where;            /* the file's path, for the logs (an update of the
                             * content alone sends no path) */
    char sha[SHA256_HEX_LEN + 1];     /* the content's hash (a delete: expected) */
    char expect[SHA256_HEX_LEN + 1];  /* update: the precondition */
    char *content;                    /* owned; NULL: keep the content */
    size_t content_len;
    char memory_id[CACHE_ID_MAX];
    char tomb_id[CACHE_ID_MAX]; /* the tombstone this write takes over, or "" */
    char node_id[CACHE_ID_MAX]; /* the file's memory when planned ("" for none) */
    int64_t sent_id;            /* its cache_sent record while it is out */
    bool resent;                /* that record was there: sent before, answer lost */
};

struct plan {
    struct job *v;
    size_t n, cap;
    size_t limit;        /* deletes allowed this sync (rec_delete_cap) */
    size_t cap_deletes;  /* deletes (or logged would-be deletes) counted */
    size_t held;         /* held back by the cap */
    size_t log_deletes;
    size_t sliced;       /* content-only writes planned (ENGINE_PUSH_SLICE) */
    size_t deferred;     /* dirty files left for the next round */
};

/* The tombstones of the store, loaded once per sync. */
struct tombs {
    struct cache_tombstone *v;
    size_t n;
    bool *dropped; /* [n]: dropped by this sync's plan (the memory stays) */
};

/* Uploads that went out and are not settled yet (cache/sent.c). */
struct sents {
    struct cache_sent *v;
    size_t n;
};

/* One sync of one store, as it goes. */
struct cycle {
    struct syncer *s;
    struct sstore *st;
    bool final;         /* the last sync before the writers go (unmount, flush) */
    struct remote r;
    struct files files;
    struct files waiting; /* changed files a writer has not finished: not pushed */
    struct tombs tombs;
    struct sents sent;
    bool continuing;      /* the last sync of the store left a backlog */
    bool read;            /* the remote view was read from the store now (the
                           * feed or a full listing), not the cache's baselines */
    struct plan plan;
    struct syncer_report rep;
    uint64_t *reverted; /* nodes sent back to their baseline (kernel pages) */
    size_t n_reverted;
};

/* cycle.c */
/* The listed memory with this id / at this path, or NULL. */
const struct cache_remote *remote_find_id(const struct remote *r, const char *id);
const struct cache_remote *remote_find_path(const struct remote *r, const char *path);
/* Logs msg once per (msg, key, key2) for the life of the mount. */
bool cycle_first_time(struct sstore *st, const char *msg, const char *key, const char *key2);
/* The deletion mode the syncer runs with, in reconcile's terms. */
enum rec_deletions cycle_mode(const struct syncer *s);

/* plan.c: steps 2 and 3, deciding every tombstone and dirty file. */
int plan_all(struct cycle *cy);
void plan_free(struct plan *p);

/* push.c: sends the planned writes (those that free a path first) and
 * records each result in the cache and in cy->rep. */
void push_writes(struct cycle *cy);

#endif
