/* ops_content.c - an open file's content between the cache and the
 * store, for the FUSE operations (ops.c, ops_write.c): loading it into
 * the open file (downloading it first when the cache lacks it), saving
 * it at a close or fsync, and the take-over of a writer's open.
 *
 * A download runs on the calling request's thread after
 * fsloop_blocking() has handed the device to another thread, so the
 * mount's other requests are served meanwhile.  Invariant for every
 * caller: from that hand-off on, the request runs beside the new
 * leader, which may run the file's RELEASE as soon as the request has
 * answered; what the request does after its answer uses values it read
 * before or a reference of its own (ofile_hold; docs/architecture.md,
 * "FUSE loop threads").  No lock is held across a download. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "fsloop.h"
#include "log.h"
#include "ops.h"

/* Downloads the store's version of row (its baseline) when the cache
 * lacks it: a cut edit's save puts it back (openfile.c). */
static void fetch_base(struct fs_store *s, uint64_t row)
{
    struct cnode n;
    if (cache_getattr(s->cache, row, &n) != 0)
        return;
    if (n.base_sha[0] && n.memory_id[0] && !cache_blob_has(s->cache, n.base_sha)) {
        snprintf(n.sha, sizeof(n.sha), "%s", n.base_sha);
        int64_t deadline = 0;
        int rc = ops_fetch(s, &n, false, true, &deadline);
        if (rc)
            log_warn("failed to fetch memory content", "memory_store_id", s->id, "path", n.path,
                     "error", strerror(-rc));
    }
    cnode_clear(&n);
}

int ops_take_over(struct fs_store *s, struct ofile *f, bool *dropped)
{
    if (ofile_is_cut(f))
        fetch_base(s, f->row);
    return ofile_take_over(f, s->cache, dropped);
}

int ops_fetch(struct fs_store *s, const struct cnode *n, bool wait, bool queue,
              int64_t *deadline_ms)
{
    if (!*deadline_ms)
        *deadline_ms = syncer_fetch_deadline(s->sync);
    /* With no lock held, while another thread serves the mount's other
     * requests. */
    fsloop_blocking();
    int rc = syncer_fetch(s->sync, s->sync_idx, n->memory_id, n->sha, queue, *deadline_ms);
    if (rc == -ESTALE) {
        /* The memory changed again since it was listed: the sync thread
         * was kicked to bring the node to it (and to tell the kernel).
         * With wait (an open's first try), wait for that, 10 s at most,
         * then try again.  (A quarter of a second a try, four tries, gave
         * EIO whenever that sync took longer: a slow version feed,
         * another store's sync first.)  Never for a rename: it holds its
         * directories' locks, which the sync's notifications may need. */
        for (int i = 0; i < (wait ? 200 : 5); i++) {
            if (syncer_past(*deadline_ms))
                return -ETIMEDOUT;
            usleep(50 * 1000);
            struct cnode now;
            if (cache_getattr(s->cache, n->ino, &now) != 0)
                break;
            bool moved = strcmp(now.sha, n->sha) != 0 || strcmp(now.memory_id, n->memory_id);
            cnode_clear(&now);
            if (moved)
                break;
        }
        rc = 0;
    }
    return rc;
}

int ops_save(struct fs_store *s, struct ofile *f, unsigned edit, enum ofile_flush_why why,
             const struct cache_then *then)
{
    if (ofile_is_cut(f))
        fetch_base(s, f->row);
    bool dropped = false;
    int rc = ofile_flush(f, edit, s->cache, why, then, &dropped);
    /* The cut edit, or an edit that lost to the store, went: the kernel
     * has its pages and attributes. */
    if (dropped)
        fs_notify_reverted(s, f->row);
    return rc;
}

int ops_load(struct fs_store *s, struct ofile *f)
{
    /* One bound for every try, from the first download: a memory that
     * keeps changing on the server makes each download stale (ESTALE),
     * and each try used to start the whole --fetch-timeout again. */
    int64_t deadline = 0;
    for (int attempt = 0;; attempt++) {
        struct cnode n;
        ofile_lock(f);
        int rc = cache_getattr(s->cache, f->row, &n);
        if (rc) {
            ofile_unlock(f);
            return rc == -ENOENT ? -EIO : rc;
        }
        if (n.is_dir) {
            rc = -EISDIR;
        } else if (!ofile_current_locked(f, n.sha)) {
            char *buf = NULL;
            size_t len = 0;
            if (!n.sha[0])
                rc = (buf = strdup("")) ? 0 : -ENOMEM;
            else
                rc = cache_blob_get(s->cache, n.sha, &buf, &len);
            if (!rc)
                ofile_install_locked(f, buf, len, n.sha);
        }
        /* At every load, installed or not: a save since (an O_TRUNC
         * open's, which loads nothing) made the row saved. */
        if (!rc && !n.is_dir)
            f->new_row = n.unsaved == CACHE_NEW;
        ofile_unlock(f);
        if (rc == -ENOENT && attempt < 4 && n.memory_id[0]) {
            rc = ops_fetch(s, &n, attempt == 0, true, &deadline); /* not in the cache yet */
            if (!rc) {
                cnode_clear(&n);
                continue;
            }
        }
        if (rc == -ESTALE)
            rc = -EIO;
        if (!rc && !n.is_dir) {
            /* The eviction order of --cache-max-size (least recently
             * used first), refreshed at most once an hour (a creation
             * or a save here stamps it too, cache/write.c, content.c). */
            int64_t now = ops_now_ns();
            if (n.used_ns < now - 3600LL * 1000000000LL)
                cache_mark_used(s->cache, n.ino, now);
        }
        if (rc && rc != -EISDIR)
            log_warn("failed to fetch memory content", "memory_store_id", s->id, "path", n.path,
                     "error", strerror(-rc));
        cnode_clear(&n);
        /* A download that failed is an I/O error to the caller, whatever
         * the server or the network said (the log has it): EACCES for a
         * revoked key would read as the file's mode, EINVAL as a bad call. */
        return rc == 0 || rc == -EISDIR || rc == -ENOMEM ? rc : -EIO;
    }
}
