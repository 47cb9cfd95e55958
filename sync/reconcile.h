/* reconcile.h - the pure decision function of the sync engine: given what
 * the cache knows of one memory (baseline, local state) and what the
 * listing shows (remote), say what the sync must do, with the exact log
 * message; and classify a write's result into its follow-up.
 *
 * Everything here is pure: no I/O, no allocation, no logging, no clock.
 * Strings in the outputs are either static or point into the input, so
 * they live as long as the input does.  The full decision table is the
 * design comment at the top of reconcile.c. */
#ifndef MFS_SYNC_RECONCILE_H
#define MFS_SYNC_RECONCILE_H

#include <stdbool.h>
#include <stddef.h>

#include "log.h"

enum rec_access { REC_READ_WRITE = 0, REC_READ_ONLY };

/* --sync-deletions */
enum rec_deletions { REC_DEL_ENABLED = 0, REC_DEL_LOG_ONLY, REC_DEL_DISABLED };

/* What the cache holds locally for the path. */
enum rec_local {
    REC_L_NONE = 0, /* no file and no tombstone */
    REC_L_FILE,     /* a live file: sha + path */
    REC_L_DELETED,  /* a tombstone: the file was removed through the mount */
};

/* One memory (or one never-synced path).  String fields: NULL and "" both
 * mean "absent".  Hashes are 64 lowercase hex. */
struct rec_in {
    /* Baseline B, recorded at the last successful sync (all absent for a
     * file never synced; a tombstone keeps them). */
    const char *memory_id;
    const char *base_sha;
    const char *base_path;

    /* Local L. */
    enum rec_local local;
    const char *sha;         /* FILE: current content hash (absent = base_sha:
                              * the bytes were never changed locally) */
    const char *path;        /* FILE: current path; DELETED: its last path */
    bool dirty;              /* changed since the baseline (content/path) */
    const char *refused_sha; /* the server refused this content before */
    const char *refused_path;/* ...at this path (absent: any path) */
    const char *sent_sha;    /* an upload of this hash lost its answer */
    const char *sent_path;   /* ...to this path (absent: not known) */

    /* Remote R: the listed memory with memory_id, or, when there is no
     * baseline, the listed memory at the same path. */
    bool remote;
    const char *remote_id;
    const char *remote_sha;
    const char *remote_path;
    /* FILE with a baseline: another memory holds L's path on the server,
     * one no local file has and no deletion of this mount names, so no
     * write of this mount will free the path (the engine decides that). */
    bool path_held;

    enum rec_access access;
    enum rec_deletions deletions;
};

enum rec_action {
    REC_NOTHING = 0,   /* in step */
    REC_PULL,          /* make the local file equal to R; baseline := R */
    REC_ADOPT,         /* local already equals R: baseline := R, clean */
    REC_CREATE,        /* POST a new memory at L.path with L's content */
    REC_UPDATE,        /* POST memory_id: content and/or path, precondition */
    REC_DELETE,        /* DELETE memory_id?expected_content_sha256=expect */
    REC_LOG_DELETE,    /* log_only: log what would be deleted, keep all */
    REC_KEEP_REMOTE,   /* no delete (read-only store): drop the tombstone;
                        * the server's copy shows again */
    REC_CONFLICT_PULL, /* both changed: keep L as a conflict record, pull R */
    REC_RESTORE,       /* deleted locally, changed remotely: pull R back */
    REC_RECREATE,      /* deleted remotely, changed locally: create again */
    REC_KEEP_UNSYNCED, /* read-only: the local change stays, never pushed */
    REC_REMOVE_LOCAL,  /* deleted remotely, clean locally: remove the file */
    REC_FORGET,        /* gone on both sides: drop baseline and tombstone */
    REC_SKIP_REFUSED,  /* would upload content the server refused before */
    REC_HOLD_DELETE,   /* disabled: the deletion stays local (the file stays
                        * gone for the session), nothing is sent */
};

struct rec_out {
    enum rec_action action;
    enum log_level level;  /* of msg */
    const char *msg;       /* static; NULL: nothing to log */
    /* The standing state will be decided again at every sync until
     * something changes: log msg once per (path, sha), not every sync. */
    bool standing;

    /* The baseline the decision used (into the input): the recorded one,
     * or R when sent_sha showed R is our own lost upload (adopted_sent). */
    const char *base_id, *base_sha, *base_path;
    bool adopted_sent;

    /* UPDATE: precondition content_sha256.  DELETE and LOG_DELETE: the
     * expected_content_sha256.  Always the listed R.sha.  Else NULL. */
    const char *expect_sha;
    bool send_content;     /* UPDATE: content differs from the baseline */
    bool send_path;        /* UPDATE: path differs (a rename) */
    /* PULL, CONFLICT_PULL, RESTORE, KEEP_REMOTE: the local bytes must
     * become R.sha's (from the blob cache, else fetched).  False for a
     * remote rename of content the file already has. */
    bool need_content;
    /* CONFLICT_PULL: L's content differs from R and from the baseline, so
     * it is saved as a conflict record before the pull. */
    bool keep_local;
    /* The remote memory is gone: the baseline (memory_id) is dropped and
     * the file stays as a never-synced one (KEEP_UNSYNCED, SKIP_REFUSED). */
    bool forget_base;
    bool counts_cap;       /* DELETE, LOG_DELETE: uses the per-sync cap */
};

/* The deletion mode that governs a tombstone: the stricter of the mode in
 * force when the file was removed (which the tombstone records) and the
 * mode of the process syncing now.  A deletion is sent only when both say
 * enabled. */
enum rec_deletions rec_deletion_mode(enum rec_deletions recorded, enum rec_deletions now);

/* Decides for one memory.  Returns 0, or -EINVAL when in/out is NULL or
 * a FILE has no path (out is then REC_NOTHING). */
int rec_decide(const struct rec_in *in, struct rec_out *out);

/* Deletes allowed per store per sync: max(8, min(50, memories / 4)),
 * memories being the store's baseline size. */
size_t rec_delete_cap(size_t memories);

/* A write's result, as api_memories_write reports it (api.h errnos). */
struct rec_write {
    enum rec_action action; /* CREATE, RECREATE, UPDATE or DELETE */
    int err;                /* 0 or a negative errno */
    int attempts;           /* requests sent; > 1: an earlier one may have applied */
    const char *path;       /* CREATE/RECREATE: the path sent */
    const char *sha;        /* CREATE/RECREATE/UPDATE: the hash sent */
    /* -EEXIST: the memory the server named, and its hash if the caller
     * knows it (from the listing); NULL when unknown. */
    const char *conflict_path;
    const char *conflict_sha;
};

enum rec_followup {
    REC_FU_DONE = 0,    /* applied: baseline := answer (delete: drop all) */
    REC_FU_ADOPT,       /* our earlier attempt applied: adopt the named memory */
    REC_FU_GONE,        /* delete -> 404: already gone, drop baseline+tombstone */
    REC_FU_STORE_WINS,  /* precondition lost: keep local state; next sync's
                         * listing pulls (CONFLICT_PULL or RESTORE) */
    REC_FU_RECREATE,    /* update -> 404: create again, the file is the only copy */
    REC_FU_REFUSED,     /* 400/413/not UTF-8: refused_sha := sha until it changes */
    REC_FU_RETRY,       /* path conflict, network, 429, 5xx...: stays dirty,
                         * next sync tries again; nothing lost */
    REC_FU_INVALID,     /* the rec_write was not a write (programming error) */
};

struct rec_result {
    enum rec_followup fu;
    enum log_level level;
    const char *msg; /* static; NULL: nothing to log */
    /* The request may have applied without us seeing the answer: keep
     * sent_sha for the next listing to settle.  False: clear it. */
    bool keep_sent;
};

void rec_classify(const struct rec_write *w, struct rec_result *out);

/* Short names ("pull", "conflict_pull", ...) for logs and tests. */
const char *rec_action_name(enum rec_action a);
const char *rec_followup_name(enum rec_followup f);
/* CREATE, UPDATE, DELETE or RECREATE: the actions that write remotely. */
bool rec_action_writes(enum rec_action a);

/* Log messages (the SDK worker's strings where one applies, D.11). */
#define REC_MSG_BOTH_CHANGED "memory changed both locally and remotely; keeping the remote version"
#define REC_MSG_UPLOAD_LOST_RACE \
    "memory changed both locally and remotely; the upload was refused and the local edit loses"
#define REC_MSG_PATH_HELD \
    "another memory holds on the server the path this file was moved to; keeping the remote " \
    "version: the file goes back to its memory's path"
#define REC_MSG_RESTORE "memory deleted locally but changed remotely; restoring the remote version"
#define REC_MSG_DELETE_LOST_RACE \
    "memory deleted locally but changed remotely; keeping the remote version"
#define REC_MSG_RECREATE "memory deleted remotely but edited locally; re-creating it from the file"
#define REC_MSG_RO_REMOTE_DELETED \
    "memory deleted remotely but edited locally; keeping the file, which a read-only store cannot push"
#define REC_MSG_RO_EDIT \
    "memory edited locally in a read-only store; the edit stays unsynced until the store changes it"
#define REC_MSG_RO_NEW "new file in a read-only store; it stays local and is never pushed"
#define REC_MSG_RO_DELETE "a read-only store cannot delete memories; restoring the file"
#define REC_MSG_LOG_ONLY "log-only: sync would delete this memory on the server"
#define REC_MSG_DEL_DISABLED "remote deletes are disabled; locally deleted memories stay on the server"
#define REC_MSG_REMOVE_LOCAL "memory deleted remotely; removing the local file"
#define REC_MSG_SKIP_REFUSED "the server refused this content before; not retrying until it changes"
#define REC_MSG_ADOPT_SENT "the store holds an upload whose answer was lost; adopting it"
#define REC_MSG_REFUSED \
    "the server rejected this memory file, so it stays un-synced until its content changes"
#define REC_MSG_PATH_CONFLICT \
    "the path conflicts with another memory on the server; retrying at the next sync"
#define REC_MSG_UPLOAD_FAILED "failed to upload memory"
#define REC_MSG_DELETED "propagated local deletion"
#define REC_MSG_DELETE_FAILED "failed to delete memory"
#define REC_MSG_DELETE_CAP "delete cap reached: %s %zu deletes, held %zu for later syncs"

#endif
