/* finalsync.c - the final sync of stores at unmount (memstorefs unmount,
 * the session's end, a signal): a short grace for the files of those
 * stores still open with unsaved edits, which are then kept as records
 * (their buffers left as they are; the daemon's other stores' open files
 * are not this unmount's to wait for or touch; on a full disk with the
 * cache's reserve, freed for them; one that still cannot be kept is lost
 * and named in its store's report); the sync of every store
 * on a thread of its own, bounded by the flush timeout, past which the
 * requests in flight for those stores (not the others') are cancelled
 * and what they carried stays dirty in the cache for the next mount; then, once the stores are torn down (no
 * write can land after it: an edit closed in one store while another's
 * teardown waited was reported as pushed), one line per store with
 * something left unpushed, to the log and to the caller's report.
 * Main thread only (the sync runs on its helper thread, joined here). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "daemon.h"
#include "engine.h"
#include "fs.h"
#include "http.h"
#include "log.h"
#include "openfile.h"

/* What the helper thread syncs. */
struct final_job {
    struct daemon *d;
    struct fs_store **v;
    size_t n;
    bool freed; /* the cache's reserve, for these syncs */
};

/* The cache out of room (a full disk): its reserve's blocks are given
 * back for this sync, which must record what it sends (cache/reserve.c).
 * Whether any were. */
static bool free_reserve(struct cache *c)
{
    uint64_t freed = 0;
    return cache_lacks_room(c) && cache_reserve_release(c, &freed) == 0 && freed > 0;
}

static void *final_main(void *arg)
{
    struct final_job *j = arg;
    bool freed = j->freed;
    for (size_t i = 0; i < j->n; i++) {
        char why[512];
        freed = freed || free_reserve(j->d->cache);
        int rc = syncer_sync(j->d->sync, j->v[i]->sync_idx, why, sizeof(why), NULL);
        /* Found out of room only now: once more, with the reserve.  Even
         * when the sync succeeded, since a record it could not write does
         * not fail it (push.c: the upload goes out, its answer is not
         * kept, and the file would be named as not pushed). */
        if (!freed && (freed = free_reserve(j->d->cache)))
            rc = syncer_sync(j->d->sync, j->v[i]->sync_idx, why, sizeof(why), NULL);
        if (rc)
            log_warn("memory flush failed", "memory_store_id", j->v[i]->id, "error", why);
    }
    __atomic_store_n(&j->freed, freed, __ATOMIC_RELEASE);
    return NULL;
}

/* Whether an open file's row belongs to one of the stores being
 * unmounted: the open files of the others are none of this unmount's. */
static bool of_these(void *arg, uint64_t row)
{
    const struct final_job *j = arg;
    char id[CACHE_ID_MAX];
    if (cache_store_of(j->d->cache, row, id) != 0)
        return true; /* unknown: its keep is tried, and a failure said */
    for (size_t i = 0; i < j->n; i++)
        if (strcmp(j->v[i]->id, id) == 0)
            return true;
    return false;
}

/* An open file's unsaved edit that could not be kept: counted for its
 * store's report (the edit is lost with the daemon's end). */
static void edit_lost(void *arg, uint64_t row, int err)
{
    const struct final_job *j = arg;
    char id[CACHE_ID_MAX];
    if (cache_store_of(j->d->cache, row, id) != 0) {
        /* No store to charge it to (the cache cannot say): the log only. */
        char r[32];
        snprintf(r, sizeof(r), "%llu", (unsigned long long)row);
        log_error("cannot keep the unsaved edits of a file still open at unmount", "ino", r,
                  "error", strerror(-err), "cache_dir", j->d->cache_dir);
        return;
    }
    for (size_t i = 0; i < j->n; i++)
        if (strcmp(j->v[i]->id, id) == 0) {
            if (!j->v[i]->edits_lost++)
                j->v[i]->edits_lost_err = err;
            return;
        }
}

/* The contract: daemon.h. */
void daemon_final_sync(struct daemon *d, struct fs_store **v, size_t n, bool last)
{
    if (!d->sync || !n)
        return;
    /* Only content a writer closed or fsynced is pushed.  Files still open
     * with unsaved edits get a short grace to be closed (a tenth of the
     * flush timeout); past it, their edits are kept as records (memstorefs
     * conflicts) and the final sync pushes their last saved state. */
    struct final_job j = {d, v, n, false};
    for (size_t i = 0; i < n; i++)
        v[i]->edits_lost = 0;
    /* The flush timeout bounds the whole: the grace is spent from it (it
     * came on top, and an unmount took 10% longer than it said). */
    struct timespec until; /* monotonic: a step of the wall clock stretches nothing */
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += d->flush_timeout;
    int64_t grace_ms = (int64_t)d->flush_timeout * 100;
    /* A shared mapping's dirty pages are an edit no request brought yet:
     * written into the open files now, they are unsaved edits as any
     * (closed in the grace, else kept as records), where the connection's
     * end would throw them away.  Not for a store whose request loop has
     * ended (a receive error: daemon.c unmounts it then), whose
     * connection may be alive: the kernel would wait for WRITEs nobody
     * reads, holding this thread for good. */
    for (size_t i = 0; i < n; i++)
        if (!v[i]->gone && !__atomic_load_n(&v[i]->loop_done, __ATOMIC_ACQUIRE))
            fs_notify_settle_open(v[i]);
    for (int64_t waited = 0; waited < grace_ms && ofile_unsaved_count(of_these, &j) > 0;
         waited += 100)
        usleep(100 * 1000);
    /* Keeping an edit writes to the cache: on a full disk, with the
     * reserve (freed before the sync would free it anyway). */
    j.freed = free_reserve(d->cache);
    size_t kept = ofile_keep_unsaved_all(d->cache, of_these, edit_lost, &j);
    size_t lost = 0;
    for (size_t i = 0; i < n; i++)
        lost += v[i]->edits_lost;
    /* Found out of room only by the keeping: once more, with the reserve. */
    if (lost && !j.freed && (j.freed = free_reserve(d->cache))) {
        for (size_t i = 0; i < n; i++)
            v[i]->edits_lost = 0;
        kept += ofile_keep_unsaved_all(d->cache, of_these, edit_lost, &j);
    }
    if (kept) {
        char nk[32];
        snprintf(nk, sizeof(nk), "%zu", kept);
        log_warn("files were still open with unsaved edits at unmount; their last saved state "
                 "is pushed and the edits are kept in the cache (memstorefs conflicts)",
                 "files", nk, "cache_dir", d->cache_dir);
    }
    for (size_t i = 0; i < n; i++)
        if (v[i]->edits_lost) {
            char nl[32];
            snprintf(nl, sizeof(nl), "%zu", v[i]->edits_lost);
            log_error("cannot keep the unsaved edits of a file still open at unmount",
                      "memory_store_id", v[i]->id, "files", nl, "error",
                      strerror(-v[i]->edits_lost_err), "cache_dir", d->cache_dir);
        }
    pthread_t t;
    if (pthread_create(&t, NULL, final_main, &j) != 0) {
        final_main(&j);
    } else {
        if (pthread_clockjoin_np(t, NULL, CLOCK_MONOTONIC, &until) != 0) {
            char secs[32];
            snprintf(secs, sizeof(secs), "%d", d->flush_timeout);
            log_warn("final memory sync cut off at the flush timeout; what it had not pushed "
                     "stays in the cache for the next mount", "flush_timeout_s", secs);
            /* These stores' requests only: the other stores of the
             * daemon, still mounted, go on syncing and downloading. */
            for (size_t i = 0; i < n; i++)
                syncer_cancel(d->sync, v[i]->sync_idx, true);
            pthread_join(t, NULL);
            for (size_t i = 0; i < n; i++)
                syncer_cancel(d->sync, v[i]->sync_idx, false);
        }
    }
    /* The daemon's other stores go on: their own last sync needs a reserve
     * too, made again where the disk has room now (else said). */
    if (!last && __atomic_load_n(&j.freed, __ATOMIC_ACQUIRE))
        (void)cache_reserve_keep(d->cache, d->cache_reserve);
}

/* One store's lines of the final report; whether it left something. */
static bool report_store(struct daemon *d, const struct fs_store *s, FILE *report)
{
    struct cache_store_stats st;
    int rc = cache_store_stats(d->cache, s->id, &st);
    if (rc) {
        /* Not known to be all pushed: said, and counted as left. */
        char msg[900], lost[300] = "";
        if (s->edits_lost)
            snprintf(lost, sizeof(lost), "; %zu file%s still open with edits no writer saved, "
                     "which the cache could not keep (%s): those edits are lost", s->edits_lost,
                     s->edits_lost == 1 ? "" : "s", strerror(-s->edits_lost_err));
        snprintf(msg, sizeof(msg), "memory store %s: cannot read what is left unpushed (%s); "
                 "the cache (%s) keeps it for the next mount%s", s->id, strerror(-rc),
                 d->cache_dir, lost);
        log_warn("memory flush left changes unpushed", "memory_store_id", s->id, "path",
                 s->mount_path, "unpushed", msg);
        if (report)
            fprintf(report, "%s\n", msg);
        return true;
    }
    unsigned long long left = st.dirty + st.tombstones - st.kept_deletions,
                       refused = st.refused, unsaved = st.unsaved;
    /* Closed while the disk was full, with no room made since: only the
     * daemon's journal holds them. */
    unsigned long long waiting = st.journal_waiting;
    /* Open at the final sync with edits no writer saved, which the cache
     * could not keep: in the buffer alone, gone with the daemon. */
    unsigned long long lost = s->edits_lost;
    if (!left && !refused && !unsaved && !waiting && !lost)
        return false;
    /* What happens to each kind, exactly: changes are pushed by the next
     * mount or `flush`; a refused file only once its content changes; a
     * file never closed only once a writer closes it. */
    char msg[1800], parts[1400] = "";
    size_t k = 0;
    if (left)
        k += (size_t)snprintf(parts + k, sizeof(parts) - k, "%llu local change%s not pushed "
                              "(the next mount of this store with the same --cache-dir, or "
                              "memstorefs flush, pushes %s)", left, left == 1 ? "" : "s",
                              left == 1 ? "it" : "them");
    if (refused)
        k += (size_t)snprintf(parts + k, sizeof(parts) - k, "%s%llu file%s refused by the "
                              "server (retried only once %s content changes)", k ? "; " : "",
                              refused, refused == 1 ? "" : "s", refused == 1 ? "its" : "their");
    if (unsaved)
        k += (size_t)snprintf(parts + k, sizeof(parts) - k, "%s%llu new file%s never closed by "
                              "a writer (pushed only once a writer closes or fsyncs %s)",
                              k ? "; " : "", unsaved, unsaved == 1 ? "" : "s",
                              unsaved == 1 ? "it" : "them");
    if (waiting)
        k += (size_t)snprintf(parts + k, sizeof(parts) - k, "%s%llu file%s closed while the "
                              "cache's disk was full, kept in its journal of closed files (the "
                              "next start with room, or memstorefs flush, puts %s back and "
                              "pushes %s)", k ? "; " : "", waiting, waiting == 1 ? "" : "s",
                              waiting == 1 ? "it" : "them", waiting == 1 ? "it" : "them");
    if (lost)
        snprintf(parts + k, sizeof(parts) - k, "%s%llu file%s still open with edits no writer "
                 "saved, which the cache could not keep (%s): those edits are lost",
                 k ? "; " : "", lost, lost == 1 ? "" : "s", strerror(-s->edits_lost_err));
    /* Lost edits alone: nothing stays in the cache. */
    snprintf(msg, sizeof(msg), "memory store %s: %s; %s (%s)", s->id, parts,
             left || refused || unsaved || waiting ? "they stay in the cache" : "cache",
             d->cache_dir);
    log_warn("memory flush left changes unpushed", "memory_store_id", s->id, "path",
             s->mount_path, "unpushed", msg);
    if (report) {
        fprintf(report, "%s\n", msg);
        daemon_list_unpushed(d->cache, s->id, s->mount_path, true, report);
    }
    return true;
}

/* The contract: daemon.h. */
size_t daemon_final_report(struct daemon *d, struct fs_store **v, size_t n, FILE *report)
{
    size_t stores_left = 0;
    if (!d->sync)
        return 0;
    for (size_t i = 0; i < n; i++) {
        /* Each store's own text, kept for an unmount that asked at the
         * same time (ctlserve.c answers it once this one is done). */
        char *text = NULL;
        size_t len = 0;
        FILE *mine = open_memstream(&text, &len);
        bool left = report_store(d, v[i], mine ? mine : report);
        if (mine) {
            fclose(mine);
            if (report && text)
                fputs(text, report);
        }
        stores_left += left;
        free(v[i]->final_report);
        v[i]->final_report = text ? text : strdup("");
        v[i]->final_left = left;
    }
    return stores_left;
}
