/* cycle_int.h - what cycle.c (one sync of a store: deciding) and push.c
 * (sending the writes and recording their results) share.  Not for use
 * outside sync/. */
#ifndef MFS_SYNC_CYCLE_INT_H
#define MFS_SYNC_CYCLE_INT_H

#include "engine_int.h"

struct file {
    struct cnode n;
    char refused_sha[SHA256_HEX_LEN + 1];
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
};

struct plan {
    struct job *v;
    size_t n, cap;
    size_t limit;        /* deletes allowed this sync (rec_delete_cap) */
    size_t cap_deletes;  /* deletes (or logged would-be deletes) counted */
    size_t held;         /* held back by the cap */
    size_t log_deletes;
};

/* The listed memory with this id, or NULL. */
const struct cache_remote *remote_find_id(const struct remote *r, const char *id);
/* Remembers (sha) or forgets (NULL) an upload of ino whose answer may be
 * lost, for the next listing to settle. */
void cycle_sent_set(struct sstore *st, uint64_t ino, const char *sha);
/* Sends the planned writes (those that free a path first) and records
 * each result in the cache and in rep. */
void push_writes(struct syncer *s, struct sstore *st, const struct remote *r, struct plan *p,
                 struct syncer_report *rep);

#endif
