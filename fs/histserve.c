/* histserve.c - the daemon's side of memory history and recovery: the
 * "hist-..." commands of the control socket (ctlserve.c hands them here).
 * Fields are separated by tabs (no memory path holds a control
 * character); MOUNT is a mount point of this daemon, REL a memory path.
 *   hist-log TAB MOUNT TAB REL TAB 0|1            versions of a file (1: JSON)
 *   hist-deleted TAB MOUNT TAB REL TAB 0|1        memories deleted under a dir
 *   hist-show TAB MOUNT TAB REL TAB VERSION        "data N", the bytes, "\n"
 *   hist-restore TAB MOUNT TAB REL TAB VERSION TAB TO   (TO: "" or a REL)
 *   hist-conflict-find TAB ID TAB CACHE_DIR        "found STORE DIR" or "none"
 *   hist-conflict-diff TAB ID      "path P", "current P|-", data frames
 *   hist-conflict-restore TAB ID
 * Each answer ends with "ok" or "error <reason>" (control_ask).
 *
 * Every command may make HTTP requests or wait for the cache, so each is
 * served by a detached thread of its own, like `sync --wait` (syncctl.c):
 * at most MAX_JOBS at once, counted (jobs) so that teardown waits for
 * them (hist_drain) after cancelling the HTTP requests; the socket is made
 * blocking with a 10 s send timeout, and an answer gets CTL_SEND_MS in
 * all (ctl_send_all), so a client that stops reading, or reads a byte at
 * a time, holds a thread 20 s at most.  The store a command names is
 * chosen on the main thread (fs_store entries live until the daemon
 * exits). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "api.h"
#include "daemon.h"
#include "engine.h"
#include "history.h"
#include "log.h"
#include "openfile.h"
#include "rules.h"

#define MAX_JOBS 16
#define MAX_FIELDS 5

static int jobs; /* atomic */

struct job {
    struct daemon *d;
    int fd;
    struct fs_store *s; /* the store of MOUNT, NULL for the conflict commands */
    char *f[MAX_FIELDS];
    int nf;
    char line[CTL_LINE_MAX];
};

void hist_api_why(const struct daemon *d, int rc, const struct api_error *e, const char *what,
                  char *why, size_t whylen)
{
    const char *url = d->cred.base_url ? d->cred.base_url : "?";
    switch (rc) {
    case -ECONNREFUSED:
    case -ETIMEDOUT:
    case -EHOSTUNREACH:
    case -ECONNRESET:
    case -ENETUNREACH:
        if (!e || !e->status) {
            snprintf(why, whylen, "%s: the memory store's server at %s cannot be reached (%s); "
                     "nothing was changed", what, url, strerror(-rc));
            return;
        }
        break;
    case -ECANCELED:
        snprintf(why, whylen, "%s: the daemon is stopping", what);
        return;
    default:
        break;
    }
    if (e && e->status)
        snprintf(why, whylen, "%s: the server at %s answered HTTP %ld%s%s%s%s", what, url,
                 e->status, e->type[0] ? " " : "", e->type, e->message[0] ? ": " : "",
                 e->message);
    else
        snprintf(why, whylen, "%s: %s", what, strerror(-rc));
}

/* ---- show and restore ---- */

/* Version v of the store, with its content; why set on failure. */
static int get_version(struct job *j, const char *id, struct api_version *v, char *why,
                       size_t whylen)
{
    struct api_error e = {0};
    int rc = api_version_get(j->d->http, j->s->id, id, v, &e);
    if (rc == -ENOENT && e.status == 404)
        snprintf(why, whylen, "memory store %s has no version %s ('memstorefs log PATH' lists "
                 "a file's versions)", j->s->id, id);
    else if (rc)
        hist_api_why(j->d, rc, &e, "cannot read the version", why, whylen);
    api_error_clear(&e);
    if (!rc && v->redacted) {
        snprintf(why, whylen, "version %s was redacted (at %s): its content is gone from the "
                 "store", id, v->redacted_at);
        rc = -ENODATA;
    } else if (!rc && v->op == API_OP_DELETED) {
        snprintf(why, whylen, "version %s records the deletion of memory %s: it holds no "
                 "content (an earlier version does: 'memstorefs log PATH')", id, v->memory_id);
        rc = -ENODATA;
    }
    if (rc)
        api_version_clear(v);
    return rc;
}

/* The file at rel, if any, must be the version's memory (or a file never
 * synced, or a memory gone from the store). */
static int check_memory(struct job *j, const char *rel, const struct api_version *v,
                        char *why, size_t whylen)
{
    struct cnode n;
    if (cache_node_at(j->d->cache, j->s->id, rel, &n) != 0)
        return 0;
    int rc = 0;
    if (n.is_dir) {
        snprintf(why, whylen, "%s%s is a directory", j->s->mount_path, rel);
        rc = -EISDIR;
    } else if (n.memory_id[0] && strcmp(n.memory_id, v->memory_id) != 0) {
        snprintf(why, whylen, "version %s is of memory %s, not of %s%s (memory %s)", v->id,
                 v->memory_id, j->s->mount_path, rel, n.memory_id);
        rc = -EINVAL;
    }
    cnode_clear(&n);
    return rc;
}

static int do_show(struct job *j, FILE *out, char *why, size_t whylen)
{
    struct api_version v;
    int rc = get_version(j, j->f[3], &v, why, whylen);
    if (!rc)
        rc = check_memory(j, j->f[2], &v, why, whylen);
    if (!rc) {
        fprintf(out, "data %zu\n", v.content_len);
        fwrite(v.content, 1, v.content_len, out);
        fputc('\n', out);
    }
    api_version_clear(&v);
    return rc;
}

static void edit_why(struct job *j, int rc, const char *path, char *why, size_t whylen)
{
    const char *m = j->s->mount_path;
    if (rc == -EROFS)
        snprintf(why, whylen, "%s%s: memory store %s is mounted read-only; a restore is "
                 "refused (EROFS: %s) and nothing was changed", m, path, j->s->id,
                 strerror(EROFS));
    else if (rc == -EBUSY)
        snprintf(why, whylen, "%s%s is open for writing; close it, then restore (nothing was "
                 "changed)", m, path);
    else if (rc == -ESHUTDOWN)
        snprintf(why, whylen, "%s%s: memory store %s is being unmounted; nothing was changed",
                 m, path, j->s->id);
    else if (rc == -ENOTDIR)
        snprintf(why, whylen, "%s%s: a file stands where a directory of that path must be",
                 m, path);
    else if (rc == -ESTALE)
        snprintf(why, whylen, "%s%s changed while the restore was looking at it (a sync moved, "
                 "removed or replaced the file); nothing was changed: look again and restore "
                 "again", m, path);
    else
        snprintf(why, whylen, "%s%s: cannot write it: %s", m, path, strerror(-rc));
}

static void say_done(FILE *out, const struct restore_done *done)
{
    if (done->kept_conflict)
        fprintf(out, "its changes that were not in the store yet are kept as a conflict "
                     "record ('memstorefs conflicts')\n");
    if (!done->unchanged)
        fprintf(out, "the next sync pushes it ('memstorefs sync --wait' pushes it now)\n");
}

/* The cache may be a sync behind the store, and a restore is often meant
 * to undo exactly a remote edit made since the last sync: judged against
 * the file's stale baseline it would change nothing ("holds the content
 * already"), or take a dirty file back to its baseline, clean, and the
 * next sync would pull the remote edit over it.  When the memory's content
 * in the store is not the file's baseline, a sync brings the file up to it
 * first, as any sync does (the store wins; an unpushed edit of the file is
 * kept as a conflict record).  Called once the restore's own checks
 * passed.  No sync otherwise: it would push the file's own unpushed edit,
 * which the restore may be meant to drop. */
/* Whether a record of the store keeps sha for memory_id. */
static bool kept_as_record(struct job *j, const char *memory_id, const char *sha)
{
    struct cache_conflict *v = NULL;
    size_t n = 0;
    bool kept = false;
    if (cache_conflicts(j->d->cache, j->s->id, &v, &n) != 0)
        return false;
    for (size_t i = 0; i < n && !kept; i++)
        kept = strcmp(v[i].memory_id, memory_id) == 0 && strcmp(v[i].local_sha, sha) == 0;
    cache_conflicts_free(v, n);
    return kept;
}

/* *synced: a sync ran; *kept: it kept the file's unpushed edit as a
 * conflict record. */
static void catch_up(struct job *j, const char *memory_id, bool *synced, bool *kept)
{
    *synced = *kept = false;
    struct cnode n;
    if (cache_file_of_memory(j->d->cache, j->s->id, memory_id, &n) != 0)
        return; /* no file has it: nothing stale to judge against */
    /* A file open for writing is refused by the restore (restore.c): no
     * sync for it (the open edit would lose to the store). */
    struct ofile *o = ofile_find(n.ino);
    bool writing = false;
    if (o) {
        ofile_lock(o);
        writing = ofile_live_writers_locked(o) > 0;
        ofile_unlock(o);
        ofile_put(o);
    }
    struct api_fetch f = {.memory_id = memory_id};
    if (!writing)
        api_memories_fetch(j->d->http, j->s->id, &f, 1);
    /* Only the content: with it changed in the store, the sync never
     * pushes the file's own unpushed edit (the store wins, and keeps it as
     * a record).  A memory deleted or only moved in the store could have
     * the sync push that edit (re-created, or moved and updated), which
     * the restore may be meant to drop: left to the next sync, as before. */
    bool behind = !writing && !f.err && strcmp(f.mem.sha, n.base_sha) != 0;
    if (!writing && f.err && f.err != -ENOENT)
        log_debug("cannot read a memory's head before a restore; restoring against the cache",
                  "memory_store_id", j->s->id, "memory_id", memory_id, "error",
                  strerror(-f.err));
    api_memory_clear(&f.mem);
    api_error_clear(&f.e);
    if (behind) {
        char why[512];
        int rc = syncer_sync_now(j->d->sync, j->s->sync_idx, why, sizeof(why), NULL);
        if (rc)
            log_warn("cannot sync a file changed in the store before restoring it; the next "
                     "sync decides between the two", "memory_store_id", j->s->id, "memory_id",
                     memory_id, "error", why);
        *synced = rc == 0;
        *kept = !rc && strcmp(n.sha, n.base_sha) != 0 && kept_as_record(j, memory_id, n.sha);
    }
    cnode_clear(&n);
}

/* What a restore of version v to path did.  copy: --to; edit: the file
 * is the version's memory's (or takes it over); gone_id: the memory of a
 * pending deletion at path ("" if none), which a new file there takes
 * over (sync/plan.c). */
static void say_restored(FILE *out, const char *m, const char *path,
                         const struct api_version *v, bool copy, bool edit, const char *gone_id,
                         const struct restore_done *done)
{
    if (done->unchanged)
        fprintf(out, "%s%s holds the content of version %s already; nothing was changed\n", m,
                path, v->id);
    else if (edit)
        fprintf(out, "restored %s%s to version %s of memory %s (%zu bytes), a local edit\n", m,
                path, v->id, v->memory_id, v->content_len);
    else if (copy)
        fprintf(out, "restored version %s of memory %s to %s%s, a new file\n", v->id,
                v->memory_id, m, path);
    else
        fprintf(out, "recreated %s%s from version %s of %smemory %s\n", m, path, v->id,
                strcmp(gone_id, v->memory_id) == 0 ? "" : "deleted ", v->memory_id);
    if (done->unchanged)
        ; /* nothing to push */
    else if (gone_id[0] && edit) /* a file made since the rm takes it over */
        fprintf(out, "the memory's deletion was not pushed yet: the next sync updates memory "
                     "%s with it\n", gone_id);
    else if (gone_id[0])
        fprintf(out, "memory %s was deleted at that path and its deletion is not pushed yet: "
                     "the next sync updates memory %s with it\n", gone_id, gone_id);
    else if (!edit)
        fprintf(out, "the next sync creates it in the store as a new memory\n");
    say_done(out, done);
}

static int do_restore(struct job *j, FILE *out, char *why, size_t whylen)
{
    const char *rel = j->f[2], *to = j->f[4][0] ? j->f[4] : NULL, *m = j->s->mount_path;
    const char *bad = NULL, *badp = rel;
    /* The command line makes clean paths; a client of its own may not. */
    if (rules_check_local_path(rel, strlen(rel), &bad) != 0 ||
        (to && (badp = to) && rules_check_local_path(to, strlen(to), &bad) != 0)) {
        snprintf(why, whylen, "'%s' is not the path of a file in the mount: %s (nothing was "
                 "changed)", badp, bad ? bad : "invalid");
        return -EINVAL;
    }
    if (j->s->read_only) {
        edit_why(j, -EROFS, rel, why, whylen);
        return -EROFS;
    }
    struct api_version v;
    int rc = get_version(j, j->f[3], &v, why, whylen);
    if (rc)
        return rc;
    bool synced = false, kept = false;
    struct cnode live, at;
    bool is_live = cache_file_of_memory(j->d->cache, j->s->id, v.memory_id, &live) == 0;
    const char *target = to ? to : rel;
    bool has_at = cache_node_at(j->d->cache, j->s->id, target, &at) == 0;
    /* A file never synced at the path of a pending local deletion takes
     * that memory over at the next sync (sync/plan.c): the new file a
     * restore makes there, or one made there since the rm. */
    char gone_id[CACHE_ID_MAX] = "";
    if (!is_live || to)
        cache_deletion_at(j->d->cache, j->s->id, target, gone_id);
    bool takes_over = !to && !is_live && has_at && !at.is_dir && !at.memory_id[0] &&
                      strcmp(gone_id, v.memory_id) == 0;
    if (to && has_at) {
        snprintf(why, whylen, "%s%s exists; --to names a new file (nothing was changed)", m, to);
        rc = -EEXIST;
    } else if (!to && is_live && strcmp(live.path, rel) != 0) {
        snprintf(why, whylen, "memory %s of version %s is at %s%s now, not at %s%s: restore "
                 "that file, or give --to PATH for a copy (nothing was changed)", v.memory_id,
                 v.id, m, live.path, m, rel);
        rc = -EINVAL;
    } else if (!to && !is_live && has_at && !takes_over) {
        snprintf(why, whylen, "%s%s is %s, not memory %s of version %s: give --to PATH for a "
                 "copy, or move it away (nothing was changed)", m, rel,
                 at.is_dir ? "a directory" : at.memory_id[0] ? "another memory's file"
                                                             : "another file", v.memory_id, v.id);
        rc = -EEXIST;
    }
    if (!rc && !to && is_live)
        catch_up(j, v.memory_id, &synced, &kept);
    /* What was checked above, checked again once the syncs are held off:
     * the sync catch_up runs (or one running meanwhile) may have moved,
     * removed or replaced the file. */
    struct restore_want want = {
        .memory_id = !to && is_live ? v.memory_id : NULL,
        .may_unsynced = takes_over,
        .may_create = to || (!is_live && !has_at),
    };
    struct restore_done done = {0};
    if (!rc && (rc = restore_write(j->d, j->s, target, v.content, v.content_len, &want, &done))) {
        edit_why(j, rc, target, why, whylen);
        if (synced) { /* "nothing was changed" is not the whole story */
            size_t l = strlen(why);
            snprintf(why + l, whylen - l, "; a sync ran first: the file has the store's "
                     "version now%s", kept ? ", its unpushed edit kept as a conflict record" : "");
        }
    }
    if (!rc && synced)
        fprintf(out, "memory %s had changed in the store since the last sync: synced it "
                     "first\n", v.memory_id);
    done.kept_conflict |= kept;
    if (!rc)
        say_restored(out, m, target, &v, to != NULL, !to && (is_live || takes_over), gone_id,
                     &done);
    if (is_live)
        cnode_clear(&live);
    if (has_at)
        cnode_clear(&at);
    api_version_clear(&v);
    return rc;
}

/* ---- conflict records ---- */

static struct fs_store *store_by_id(struct daemon *d, const char *id)
{
    for (size_t i = 0; i < d->n; i++)
        if (!__atomic_load_n(&d->stores[i].gone, __ATOMIC_ACQUIRE) &&
            strcmp(d->stores[i].id, id) == 0)
            return &d->stores[i];
    return NULL;
}

/* Record id of this daemon's cache (k->path malloc'd), or why not. */
static int get_conflict(struct job *j, struct cache_conflict *k, char store[CACHE_ID_MAX],
                        char *why, size_t whylen)
{
    char *end;
    errno = 0;
    long long id = strtoll(j->f[1], &end, 10);
    int rc = errno || end == j->f[1] || *end || id <= 0 ? -EINVAL : 0;
    if (!rc)
        rc = cache_conflict_get(j->d->cache, id, store, k);
    if (rc)
        snprintf(why, whylen, "no conflict %s in the cache of this daemon (%s)", j->f[1],
                 j->d->cache_dir);
    return rc;
}

static int do_conflict_find(struct job *j, FILE *out, char *why, size_t whylen)
{
    char mine[PATH_MAX], theirs[PATH_MAX], store[CACHE_ID_MAX];
    if (j->f[2][0] && (!realpath(j->d->cache_dir, mine) || !realpath(j->f[2], theirs) ||
                       strcmp(mine, theirs) != 0)) {
        fputs("none\n", out); /* another cache directory */
        return 0;
    }
    struct cache_conflict k;
    if (get_conflict(j, &k, store, why, whylen) != 0) {
        fputs("none\n", out);
        return 0;
    }
    /* Daemons may share a cache directory: the record is this daemon's
     * only when it mounts the record's store (a restore goes through it). */
    if (!store_by_id(j->d, store)) {
        free(k.path);
        fputs("none\n", out);
        return 0;
    }
    fprintf(out, "found %s %s\n", store, j->d->cache_dir);
    free(k.path);
    return 0;
}

static int do_conflict_diff(struct job *j, FILE *out, char *why, size_t whylen)
{
    struct cache_conflict k;
    char store[CACHE_ID_MAX], cur_path[4200] = "", other[CACHE_ID_MAX] = "";
    int rc = get_conflict(j, &k, store, why, whylen);
    if (rc)
        return rc;
    char *lost = NULL, *cur = NULL;
    size_t lost_len = 0, cur_len = 0;
    rc = cache_conflict_content(j->d->cache, k.id, &lost, &lost_len);
    if (rc)
        snprintf(why, whylen, "the content of conflict %s is not in the cache", j->f[1]);
    if (!rc) {
        rc = conflict_current(j->d->cache, store, &k, &cur, &cur_len, cur_path,
                              sizeof(cur_path), other);
        struct fs_store *s = store_by_id(j->d, store);
        struct cnode n;
        if (rc == -ENODATA && s && cache_node_at(j->d->cache, store, cur_path, &n) == 0) {
            /* Not downloaded yet: as an open would, fetch it. */
            int frc = syncer_fetch(j->d->sync, s->sync_idx, n.memory_id, n.sha, true,
                                   syncer_fetch_deadline(j->d->sync));
            /* (The download's own reason when it failed: a timeout, a
             * memory that changed again since it was listed.) */
            rc = frc ? frc
                     : conflict_current(j->d->cache, store, &k, &cur, &cur_len, cur_path,
                                        sizeof(cur_path), other);
            cnode_clear(&n);
        }
        if (rc)
            snprintf(why, whylen, "the current content of %s is not in the cache: %s",
                     cur_path, strerror(-rc));
    }
    if (!rc) {
        struct fs_store *s = store_by_id(j->d, store);
        fprintf(out, "path %s%s\n", s ? s->mount_path : "", k.path);
        char label[4600] = "-";
        if (cur)
            conflict_label(label, sizeof(label), s ? s->mount_path : "", cur_path, other);
        fprintf(out, "current %s\n", label);
        fprintf(out, "data %zu\n", lost_len);
        fwrite(lost, 1, lost_len, out);
        fprintf(out, "\ndata %zu\n", cur_len);
        if (cur)
            fwrite(cur, 1, cur_len, out);
        fputc('\n', out);
    }
    free(lost);
    free(cur);
    free(k.path);
    return rc;
}

static int do_conflict_restore(struct job *j, FILE *out, char *why, size_t whylen)
{
    struct cache_conflict k;
    char store[CACHE_ID_MAX], target[4200];
    int rc = get_conflict(j, &k, store, why, whylen);
    if (rc)
        return rc;
    struct fs_store *s = store_by_id(j->d, store);
    char *lost = NULL;
    size_t lost_len = 0;
    if (!s) {
        snprintf(why, whylen, "conflict %s is of memory store %s, which this daemon does not "
                 "mount", j->f[1], store);
        rc = -ENOENT;
    }
    if (!rc && (rc = cache_conflict_content(j->d->cache, k.id, &lost, &lost_len)))
        snprintf(why, whylen, "the content of conflict %s is not in the cache", j->f[1]);
    /* Its file: the one that has its memory now (renames followed), else
     * the one at its path, else a new one there. */
    struct cnode n;
    snprintf(target, sizeof(target), "%s", k.path);
    /* The file that has the record's memory, or at its path a file never
     * synced or a new one: never another memory's file (its next sync
     * would push the record into that memory). */
    struct restore_want want = {.memory_id = k.memory_id[0] ? k.memory_id : NULL,
                                .may_unsynced = true, .may_create = true};
    bool of_memory = false;
    if (!rc && k.memory_id[0] && cache_file_of_memory(j->d->cache, store, k.memory_id, &n) == 0) {
        snprintf(target, sizeof(target), "%s", n.path);
        cnode_clear(&n);
        want.may_unsynced = want.may_create = false;
        of_memory = true;
    } else if (!rc && cache_node_at(j->d->cache, store, target, &n) == 0) {
        if (!n.is_dir && n.memory_id[0] && strcmp(n.memory_id, k.memory_id) != 0) {
            snprintf(why, whylen, "%s%s is memory %s's file now, not memory %s's: conflict %s "
                     "is not restored over it; move that file away, or read the record with "
                     "'memstorefs conflicts show %s' (nothing was changed)", s->mount_path,
                     target, n.memory_id, k.memory_id[0] ? k.memory_id : "(none)", j->f[1],
                     j->f[1]);
            rc = -EEXIST;
        }
        cnode_clear(&n);
    }
    struct restore_done done = {0};
    if (!rc) {
        j->s = s;
        rc = restore_write(j->d, s, target, lost, lost_len, &want, &done);
        if (rc)
            edit_why(j, rc, target, why, whylen);
    }
    if (!rc) {
        cache_conflict_restored(j->d->cache, k.id);
        fprintf(out, "restored conflict %s as the content of %s%s%s%s%s (the record is "
                     "dropped: its content is the file's now)\n", j->f[1], s->mount_path,
                target, done.created ? ", a new file" : "", of_memory ? ", memory " : "",
                of_memory ? k.memory_id : "");
        say_done(out, &done);
    }
    free(lost);
    free(k.path);
    return rc;
}

/* ---- the threads ---- */

static const struct {
    const char *name;
    int nf;         /* fields, the name included */
    bool mount;     /* field 1 is a mount point */
    int (*fn)(struct job *j, FILE *out, char *why, size_t whylen);
} cmds[] = {
    {"hist-log", 4, true, NULL},
    {"hist-deleted", 4, true, NULL},
    {"hist-show", 4, true, do_show},
    {"hist-restore", 5, true, do_restore},
    {"hist-conflict-find", 3, false, do_conflict_find},
    {"hist-conflict-diff", 2, false, do_conflict_diff},
    {"hist-conflict-restore", 2, false, do_conflict_restore},
};

static int do_log(struct job *j, FILE *out, char *why, size_t whylen)
{
    bool json = strcmp(j->f[3], "1") == 0;
    if (strcmp(j->f[0], "hist-log") == 0)
        return hist_log(j->d, j->s, j->f[2], json, out, why, whylen);
    return hist_deleted(j->d, j->s, j->f[2], json, out, why, whylen);
}

static void *job_main(void *arg)
{
    struct job *j = arg;
    char why[1200] = "";
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    int rc = -ENOMEM;
    if (out) {
        rc = -EINVAL;
        for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
            if (strcmp(cmds[i].name, j->f[0]) == 0)
                rc = (cmds[i].fn ? cmds[i].fn : do_log)(j, out, why, sizeof(why));
        fclose(out);
    }
    int64_t deadline = 0; /* the whole answer's (ctl_send_all) */
    if (!rc && text)
        ctl_send_all(j->fd, text, len, &deadline);
    free(text);
    if (rc) {
        char line[1300];
        /* The reason may quote the server (its error's message): one
         * line, nothing a terminal acts on. */
        for (unsigned char *p = (unsigned char *)why; *p; p++) {
            if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) /* C1 as UTF-8 */
                p[0] = p[1] = '?';
            else if (*p < 0x20 || *p == 0x7f)
                *p = *p == '\n' || *p == '\r' || *p == '\t' ? ' ' : '?';
        }
        int n = snprintf(line, sizeof(line), "error %s\n", why[0] ? why : strerror(-rc));
        ctl_send_all(j->fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1,
                     &deadline);
    } else {
        ctl_send_all(j->fd, "ok\n", 3, &deadline);
    }
    close(j->fd);
    free(j);
    __atomic_sub_fetch(&jobs, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void refuse(int fd, const char *why)
{
    char line[700];
    int n = snprintf(line, sizeof(line), "error %s\n", why);
    (void)!send(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1,
                MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool hist_serve(struct daemon *d, int fd, const char *line)
{
    struct job *j = calloc(1, sizeof(*j));
    if (!j) {
        refuse(fd, "out of memory");
        return false;
    }
    j->d = d;
    j->fd = fd;
    snprintf(j->line, sizeof(j->line), "%s", line);
    char *p = j->line;
    for (; p && j->nf < MAX_FIELDS; j->nf++) {
        j->f[j->nf] = p;
        if ((p = strchr(p, '\t')))
            *p++ = '\0';
    }
    int want = -1;
    bool mount = false;
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (strcmp(cmds[i].name, j->f[0]) == 0)
            want = cmds[i].nf, mount = cmds[i].mount;
    if (want < 0 || j->nf != want || p) {
        refuse(fd, want < 0 ? "unknown command" : "malformed history command");
        free(j);
        return false;
    }
    for (size_t i = 0; mount && i < d->n; i++)
        if (!d->stores[i].gone && strcmp(d->stores[i].mount_path, j->f[1]) == 0)
            j->s = &d->stores[i];
    if (mount && !j->s) {
        char why[4300];
        snprintf(why, sizeof(why), "no memory store of this daemon is mounted at %s", j->f[1]);
        refuse(fd, why);
        free(j);
        return false;
    }
    /* The thread writes with blocking sends, each bounded. */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    bool started = false;
    if (__atomic_add_fetch(&jobs, 1, __ATOMIC_SEQ_CST) <= MAX_JOBS)
        started = pthread_create(&t, &a, job_main, j) == 0;
    pthread_attr_destroy(&a);
    if (!started) {
        __atomic_sub_fetch(&jobs, 1, __ATOMIC_SEQ_CST);
        refuse(fd, "too many history commands at once; try again");
        free(j);
        return false;
    }
    return true; /* the thread answers and closes fd */
}

bool hist_drain(int timeout_s)
{
    for (int i = 0; i < timeout_s * 10 && __atomic_load_n(&jobs, __ATOMIC_SEQ_CST) > 0; i++)
        usleep(100 * 1000);
    return __atomic_load_n(&jobs, __ATOMIC_SEQ_CST) == 0;
}
