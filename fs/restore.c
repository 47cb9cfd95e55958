/* restore.c - the local edit a restore makes (memstorefs restore,
 * memstorefs conflicts restore), on the daemon, off the FUSE threads.
 *
 * A restore is an ordinary local edit, made the way a write and a close
 * through the mount make one, so the sync treats it like any other: the
 * bytes are saved in the cache (cache_set_content: dirty unless back at
 * the baseline, CACHE_SAVED so the next periodic sync pushes it, with the
 * preconditions and store-wins rules of every push), and the kernel is
 * told to drop its pages and attributes of the file (notify.c, through the
 * same callbacks the sync thread uses).  A missing file is made as an
 * open(O_CREAT) makes one (cache_create_open: never pushed empty), its
 * missing directories as mkdir makes them.
 *
 * Invariants:
 *  - nothing is lost: content of the file that is not in the store (dirty
 *    or refused) and differs from what the restore writes is kept as a
 *    conflict record first (kind store_won: a version of the store
 *    replaced it; memstorefs conflicts shows it);
 *  - a file open for writing is refused (-EBUSY): its writer's buffer was
 *    loaded from the old content, and its next close would lose to the
 *    restore (or the restore to it).  The check, the record and the write
 *    are made under the file's open-file entry lock, which every open,
 *    write and close of the file takes: none can slip in between;
 *  - read-only stores: -EROFS before anything (the cache refuses too);
 *  - the store's syncs are held off meanwhile (syncer_hold): a restore
 *    during an unmount is in the cache before the final sync, which pushes
 *    it, or refused after it (-ESHUTDOWN), never left behind unreported.
 * Called from a history thread (histserve.c), never from a FUSE request,
 * with no lock held, so the kernel notifications cannot deadlock. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "engine.h"
#include "history.h"
#include "openfile.h"
#include "rules.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int restore_node_at(struct daemon *d, struct fs_store *s, const char *path, struct cnode *out)
{
    return cache_node_at(d->cache, s->id, path, out);
}

/* The directory that will hold path's last segment, made (with every
 * missing one above it) as mkdir makes them; *parent gets its row. */
static int make_parents(struct daemon *d, struct fs_store *s, const struct sync_notify *nt,
                        const char *path, uint64_t *parent)
{
    uint64_t dir = s->root;
    const char *seg = path + 1;
    for (const char *slash; (slash = strchr(seg, '/')); seg = slash + 1) {
        char name[MEM_PATH_MAX_BYTES + 1];
        snprintf(name, sizeof(name), "%.*s", (int)(slash - seg), seg);
        struct cnode n = {0};
        int rc = cache_lookup(d->cache, dir, name, &n);
        if (rc == -ENOENT) {
            cnode_clear(&n);
            rc = cache_create(d->cache, dir, name, true, now_ns(), &n);
            if (!rc)
                nt->entry_new(nt->arg, dir, name);
        } else if (!rc && !n.is_dir) {
            rc = -ENOTDIR;
        }
        if (rc) {
            cnode_clear(&n);
            return rc;
        }
        dir = n.ino;
        cnode_clear(&n);
    }
    *parent = dir;
    return 0;
}

/* The restore's check, record and write, under the entry lock of f (the
 * file's, which every open, write and close of it takes): the node read
 * here is the one replaced, so a save cannot land unrecorded between the
 * check and the write.  *changed: the content was replaced. */
static int replace_locked(struct daemon *d, struct fs_store *s, const struct ofile *f,
                          uint64_t ino, const char *buf, size_t len, const char *sha,
                          struct restore_done *done, bool *changed)
{
    struct cnode n;
    int rc = cache_getattr(d->cache, ino, &n);
    if (rc)
        return rc;
    if (n.unlinked) {
        rc = -ENOENT; /* removed meanwhile */
    } else if (ofile_live_writers_locked(f) > 0 || f->dirty) {
        rc = -EBUSY; /* a descriptor may write to it now */
    } else if (!done->created && strcmp(n.sha, sha) == 0) {
        done->unchanged = true;
    } else {
        /* Content the store does not have: kept before it is replaced (a
         * file only renamed since its last sync is dirty with the store's
         * bytes: nothing to keep). */
        bool unpushed = !n.memory_id[0] || strcmp(n.sha, n.base_sha) != 0;
        if (!done->created && n.state != CNODE_CLEAN && n.sha[0] && n.has_content && unpushed) {
            rc = cache_conflict_add(d->cache, s->id, n.path, n.memory_id, n.sha, sha);
            done->kept_conflict = !rc;
        }
        if (!rc)
            rc = cache_set_content(d->cache, ino, buf, len, now_ns(), NULL);
        *changed = !rc;
    }
    cnode_clear(&n);
    return rc;
}

static int write_held(struct daemon *d, struct fs_store *s, const char *path, const char *buf,
                      size_t len, const struct restore_want *want, struct restore_done *done);

int restore_write(struct daemon *d, struct fs_store *s, const char *path, const char *buf,
                  size_t len, const struct restore_want *want, struct restore_done *done)
{
    memset(done, 0, sizeof(*done));
    if (s->read_only)
        return -EROFS;
    if (len > MEM_CONTENT_MAX_BYTES)
        return -EFBIG;
    /* Made with the store's syncs held off: before its final sync starts
     * (which pushes it), or refused once that sync ran (an unmount). */
    if (!syncer_hold(d->sync, s->sync_idx))
        return -ESHUTDOWN;
    int rc = write_held(d, s, path, buf, len, want, done);
    syncer_release(d->sync, s->sync_idx);
    return rc;
}

/* Whether n (the file at the path now) is what the caller checked. */
static bool as_checked(const struct cnode *n, const struct restore_want *want)
{
    if (n->is_dir)
        return true; /* -EISDIR below says it */
    if (!n->memory_id[0])
        return want->may_unsynced;
    return want->memory_id && strcmp(n->memory_id, want->memory_id) == 0;
}

static int write_held(struct daemon *d, struct fs_store *s, const char *path, const char *buf,
                      size_t len, const struct restore_want *want, struct restore_done *done)
{
    struct sync_notify nt;
    fs_notify_init(s, &nt);
    char sha[SHA256_HEX_LEN + 1];
    sha256_hex(buf, len, sha);
    struct cnode n;
    uint64_t parent = 0;
    const char *name = strrchr(path, '/') + 1;
    int rc = restore_node_at(d, s, path, &n);
    if (rc == -ENOENT && !want->may_create)
        return -ESTALE; /* the file went (a sync moved or removed it) */
    if (!rc && !as_checked(&n, want)) {
        cnode_clear(&n);
        return -ESTALE; /* another file is there now */
    }
    if (rc == -ENOENT) {
        /* A new file, as open(O_CREAT) then write and close make one. */
        rc = make_parents(d, s, &nt, path, &parent);
        if (!rc)
            rc = cache_create_open(d->cache, parent, name, now_ns(), &n);
        if (rc)
            return rc;
        nt.entry_new(nt.arg, parent, name);
        done->created = true;
    } else if (rc) {
        return rc;
    } else if (n.is_dir) {
        cnode_clear(&n);
        return -EISDIR;
    }
    uint64_t ino = n.ino;
    cnode_clear(&n);
    bool changed = false;
    struct ofile *f = ofile_get(ino);
    if (!f) {
        rc = -ENOMEM;
    } else {
        ofile_lock(f);
        /* -EAGAIN: the sync changed the file between the read and the
         * record (the lock keeps writers out, not the sync): again. */
        for (int tries = 0; tries < 3; tries++)
            if ((rc = replace_locked(d, s, f, ino, buf, len, sha, done, &changed)) != -EAGAIN)
                break;
        ofile_unlock(f);
        ofile_put(f);
    }
    if (changed) /* no lock held: the kernel may call back into the mount */
        nt.inval_inode(nt.arg, ino);
    /* No empty file is left behind: the one made here, unless another file
     * was renamed over it meanwhile (its memory is not the restore's to
     * delete) or a writer opened it (its close saves it, an ordinary new
     * file). */
    if (rc && rc != -EBUSY && done->created &&
        cache_unlink_node(d->cache, parent, name, ino) == 0)
        nt.entry_gone(nt.arg, parent, ino, name);
    return rc;
}
