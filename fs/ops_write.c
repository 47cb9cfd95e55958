/* ops_write.c - the FUSE operations that change a store: create, write,
 * truncate, flush/fsync, unlink, mkdir, rmdir, rename, times; and the
 * ones refused on every store (docs/filesystem.md has the table).
 *
 * Order of checks in every operation, so each refusal has one reason:
 *   1. read-only store: EROFS (the kernel's ro mount refuses first; this is
 *      the second wall, and cache/write.c is a third);
 *   2. the marker (its name at the root): EPERM;
 *   3. operations no memory can represent: EPERM (symlink, link, device
 *      or FIFO mknod, a chmod/chown that changes anything); setting or
 *      removing an xattr is xattr.c's (ENOTSUP);
 *   4. the cache's own checks: names (EINVAL, ENAMETOOLONG), EEXIST,
 *      ENOTEMPTY, EFBIG past 102,400 bytes, ...
 * Content goes through the inode's shared buffer (openfile.c) and reaches
 * the cache at flush, fsync and release; a truncate by path is flushed at
 * once (held while a writer has the file open: the buffer is its work
 * too).  A file made by create is unsaved (never pushed) until then.  The
 * first change to a clean buffer marks the file dirty in the cache
 * straight away, so a remote listing applied meanwhile leaves it alone.
 * Replies carry the same timeouts as lookups: the kernel made the change
 * itself, so its caches are right and no notification is needed.  No lock
 * is held while replying. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ops.h"
#include "rules.h"

static bool refuse_ro(fuse_req_t req)
{
    if (!ops_store(req)->read_only)
        return false;
    fuse_reply_err(req, EROFS);
    return true;
}

/* Longer names cannot exist here (the kernel's lookup of one fails with
 * ENAMETOOLONG first; this holds for a request that comes without it). */
static bool refuse_long(fuse_req_t req, const char *name)
{
    if (strlen(name) <= MEM_NAME_MAX_BYTES)
        return false;
    fuse_reply_err(req, ENAMETOOLONG);
    return true;
}

static void reply_node(fuse_req_t req, struct fs_store *s, int rc, struct cnode *n)
{
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    struct fuse_entry_param e;
    ops_fill_entry(s, n, &e);
    cnode_clear(n);
    fuse_reply_entry(req, &e);
}

static void reply_attr(fuse_req_t req, struct fs_store *s, uint64_t row)
{
    struct cnode n;
    int rc = ops_getnode(s, row, &n);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    struct stat st;
    ops_fill_attr(s, &n, &st);
    cnode_clear(&n);
    fuse_reply_attr(req, &st, FS_TIMEOUT);
}

/* Resizes a file through its buffer: the handle's, or (truncate by path)
 * a temporary reference flushed at once. */
static int resize(struct fs_store *s, uint64_t row, struct ofile *open_f, unsigned edit,
                  uint64_t size, bool *dropped)
{
    *dropped = false;
    struct ofile *f = open_f ? open_f : ofile_get(row);
    if (!f)
        return -ENOMEM;
    int rc = size > MEM_CONTENT_MAX_BYTES ? -EFBIG : 0;
    /* By path, a writer of its own: it starts from the store's version,
     * not from an edit that lost to it or was cut short which writers
     * still hold (as an open for writing does, ops.c). */
    if (!rc && !open_f)
        rc = ops_take_over(s, f, dropped);
    if (!rc && size > 0)
        rc = ops_load(s, f);
    if (!rc)
        rc = ofile_truncate(f, edit, size, ops_now_ns(), s->cache);
    if (!rc && !open_f)
        rc = ofile_flush(f, OFILE_ANY, s->cache, OFILE_PATH, NULL, NULL);
    if (!open_f)
        ofile_put(f);
    return rc;
}

void ops_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                 struct fuse_file_info *fi)
{
    struct fs_store *s = ops_store(req);
    if (refuse_ro(req))
        return;
    if (ino == CACHE_INO_MARKER) {
        fuse_reply_err(req, EPERM);
        return;
    }
    uint64_t row = fs_to_row(s, ino);
    struct cnode n;
    int rc = cache_getattr(s->cache, row, &n);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    bool is_dir = n.is_dir, dropped = false;
    cnode_clear(&n);
    /* Modes and owners are fixed; asking for what already is succeeds (sed
     * -i and cp -p copy them onto a new file), any change is EPERM. */
    if ((to_set & FUSE_SET_ATTR_MODE) && (attr->st_mode & 07777) != ops_mode(s, is_dir))
        rc = -EPERM;
    if ((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != s->uid)
        rc = -EPERM;
    if ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != s->gid)
        rc = -EPERM;
    if (!rc && (to_set & FUSE_SET_ATTR_SIZE)) {
        if (is_dir)
            rc = -EISDIR;
        else if (attr->st_size < 0)
            rc = -EINVAL;
        else
            rc = resize(s, row, fi ? ops_ofile(fi) : NULL, ops_fh_edit(fi),
                        (uint64_t)attr->st_size, &dropped);
    }
    bool set_m = to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW);
    bool set_a = to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW);
    if (!rc && (set_m || set_a)) {
        int64_t now = ops_now_ns();
        int64_t m = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : ops_timespec_to_ns(&attr->st_mtim);
        int64_t a = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : ops_timespec_to_ns(&attr->st_atim);
        rc = cache_set_times(s->cache, row, set_a ? &a : NULL, set_m ? &m : NULL);
        if (!rc && set_m && !is_dir) {
            struct ofile *f = ofile_find(row);
            if (f)
                ofile_set_mtime(f, m);
            ofile_put(f);
        }
    }
    if (rc)
        fuse_reply_err(req, -rc);
    else
        reply_attr(req, s, row);
    /* The kernel's pages held the lost edit (a truncate keeps those below
     * the new size): dropped after the answer.  Not before: a truncate
     * holds the inode's writes off (fuse_set_nowrite) until its answer,
     * and the invalidation would wait for the write-back of a page mapped
     * and dirtied meanwhile, for ever. */
    if (dropped)
        fs_notify_reverted(s, row);
}

void ops_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    struct fs_store *s = ops_store(req);
    if (refuse_ro(req))
        return;
    if (!S_ISREG(mode)) {
        fuse_reply_err(req, EPERM); /* FIFOs, sockets, devices: no memory can be one */
        return;
    }
    struct cnode n;
    int rc = cache_create(s->cache, fs_to_row(s, parent), name, false, ops_now_ns(), &n);
    reply_node(req, s, rc, &n);
}

void ops_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    struct fs_store *s = ops_store(req);
    if (refuse_ro(req))
        return;
    struct cnode n;
    int rc = cache_create(s->cache, fs_to_row(s, parent), name, true, ops_now_ns(), &n);
    reply_node(req, s, rc, &n);
}

void ops_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fs_store *s = ops_store(req);
    if (refuse_ro(req))
        return;
    uint64_t prow = fs_to_row(s, parent);
    if (refuse_long(req, name))
        return;
    if (ops_is_marker(s, prow, name)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    fuse_reply_err(req, -cache_unlink(s->cache, prow, name, false, NULL));
}

void ops_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fs_store *s = ops_store(req);
    if (refuse_ro(req))
        return;
    uint64_t prow = fs_to_row(s, parent);
    if (refuse_long(req, name))
        return;
    if (ops_is_marker(s, prow, name)) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    fuse_reply_err(req, -cache_unlink(s->cache, prow, name, true, NULL));
}

void ops_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    if (!refuse_ro(req))
        fuse_reply_err(req, EPERM);
}

void ops_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    if (!refuse_ro(req))
        fuse_reply_err(req, EPERM);
}

void ops_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                const char *newname, unsigned int flags)
{
    struct fs_store *s = ops_store(req);
    if (refuse_ro(req))
        return;
    uint64_t prow = fs_to_row(s, parent), nrow = fs_to_row(s, newparent);
    if (refuse_long(req, name) || refuse_long(req, newname))
        return;
    if (ops_is_marker(s, prow, name) || ops_is_marker(s, nrow, newname)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    /* RENAME_EXCHANGE has no meaning for memories; RENAME_WHITEOUT is for
     * overlay filesystems. */
    if (flags & ~(unsigned)RENAME_NOREPLACE) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    /* A file renamed over a synced file whose content is not in the cache
     * moves only once it is: it could no longer be downloaded from its own
     * memory, which that rename deletes (cache/write.c). */
    int rc;
    int64_t deadline = 0; /* (set by the first download: one for all) */
    for (int attempt = 0;; attempt++) {
        rc = cache_rename(s->cache, prow, name, nrow, newname,
                          (flags & RENAME_NOREPLACE) ? CACHE_RENAME_NOREPLACE : 0);
        if (rc != -ENODATA || attempt == 4)
            break;
        struct cnode n;
        if ((rc = cache_lookup(s->cache, prow, name, &n)) != 0)
            break;
        rc = ops_fetch(s, &n, false, false, &deadline); /* it holds its directories' locks */
        if (rc)
            log_warn("failed to fetch memory content", "memory_store_id", s->id, "path", n.path,
                     "error", strerror(-rc));
        cnode_clear(&n);
        if (rc) {
            rc = -EIO; /* as a read of it would fail */
            break;
        }
    }
    fuse_reply_err(req, rc == -ENODATA ? EIO : -rc);
}

/* A create answered as soon as the cache has settled its outcome and
 * chosen the file's ino, before the node's row is written (the caller
 * then makes its first write while the row goes in). */
struct create_answer {
    fuse_req_t req;
    struct fs_store *s;
    struct fuse_file_info *fi;
    struct cnode *n;
    bool sent;
};

/* Called under the cache's lock: the new file's ofile lock taken here is
 * the one taken after it (docs/architecture.md, "Locking"), safe because
 * no other thread can know the file before this answer. */
static void answer_create(void *arg)
{
    struct create_answer *a = arg;
    a->sent = true;
    struct ofile *f = ofile_get(a->n->ino);
    char *empty = f ? strdup("") : NULL;
    struct ops_writer *w = empty ? malloc(sizeof(*w)) : NULL;
    if (!w) {
        free(empty);
        ofile_put(f);
        fuse_reply_err(a->req, ENOMEM);
        return;
    }
    ofile_lock(f);
    ofile_install_locked(f, empty, 0, a->n->sha);
    f->unsaved = true; /* pushed only once a close or fsync saves it */
    ofile_unlock(f);
    struct fuse_entry_param e;
    ops_fill_entry(a->s, a->n, &e);
    ofile_writer_open(f);
    ops_set_fh(a->fi, f, w); /* a create is a writer, whatever its access mode */
    a->fi->keep_cache = 1;
    if (fuse_reply_create(a->req, &e, a->fi) != 0) {
        ofile_writer_release(f, ops_fh_edit(a->fi));
        ops_fh_free(a->fi);
        ofile_put(f); /* interrupted: no release will come */
    }
}

void ops_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                struct fuse_file_info *fi)
{
    struct fs_store *s = ops_store(req);
    if (refuse_ro(req))
        return;
    uint64_t prow = fs_to_row(s, parent);
    if (ops_is_marker(s, prow, name)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    struct cnode n;
    struct create_answer a = {req, s, fi, &n, false};
    struct cache_then then = {answer_create, &a};
    int rc = cache_create_open_then(s->cache, prow, name, ops_now_ns(), &n, &then);
    if (rc && a.sent)
        log_error("a new file's entry could not be written to the cache after its open was "
                  "answered; its first save fails", "memory_store_id", s->id, "error",
                  strerror(-rc));
    else if (rc == -EEXIST && !(fi->flags & O_EXCL))
        /* open(O_CREAT) without O_EXCL of a name the kernel looked up as
         * free, which the sync made meanwhile: ESTALE makes the kernel
         * walk the path again (do_filp_open, LOOKUP_REVAL), find the file
         * and open it as any open does, with its own permission check
         * and O_TRUNC, after the directory's lock is let go.  (Opening it
         * here, under that lock, could download it or notify the kernel,
         * which may wait for that very directory.) */
        fuse_reply_err(req, ESTALE);
    else if (rc)
        fuse_reply_err(req, -rc);
    else if (!a.sent)
        answer_create(&a);
    cnode_clear(&n);
}

/* One write into f's buffer: at off, or for an O_APPEND descriptor at its
 * end (ofile_append; *moved: not where the kernel put it).  The first
 * change of a clean buffer marks the file dirty in the cache first. */
static int put_bytes(struct fs_store *s, struct ofile *f, const struct fuse_file_info *fi,
                     const char *buf, size_t size, off_t off, bool *moved)
{
    /* The kernel's writeback of a shared mapping's pages comes through
     * any writable handle of the inode: not that handle's edit. */
    unsigned edit = fi->writepage ? OFILE_ANY : ops_fh_edit(fi);
    if (fi->flags & O_APPEND)
        return ofile_append(f, edit, buf, size, (uint64_t)off, ops_now_ns(), s->cache, moved);
    return ofile_write(f, edit, buf, size, (uint64_t)off, ops_now_ns(), s->cache);
}

void ops_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
               struct fuse_file_info *fi)
{
    struct fs_store *s = ops_store(req);
    if (refuse_ro(req))
        return;
    struct ofile *f = ops_ofile(fi);
    if (!f || off < 0) {
        fuse_reply_err(req, f ? EINVAL : EBADF);
        return;
    }
    bool moved = false;
    int rc = put_bytes(s, f, fi, buf, size, off, &moved);
    if (rc == -EIO && ops_load(s, f) == 0) /* unloaded: the store won over an earlier edit */
        rc = put_bytes(s, f, fi, buf, size, off, &moved);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    /* Read before the answer: once the caller has it, it may close, and
     * the release (another thread) may free f. */
    const uint64_t row = f->row;
    fuse_reply_write(req, size);
    /* An append the kernel placed at a size that the store's version had
     * changed (the attributes were invalidated, not read again): the
     * bytes went at the end, and its pages and size are dropped, after
     * the answer (the write holds those pages locked until it has it). */
    if (moved)
        fs_notify_reverted(s, row);
}

/* A close answered the moment its content is durable (its journal
 * record written), while the cache stores it: the caller's wake-up and
 * its next request overlap that work instead of waiting for it. */
struct early {
    fuse_req_t req;
    bool sent;
};

static void answer_early(void *arg)
{
    struct early *e = arg;
    fuse_reply_err(e->req, 0);
    e->sent = true;
}

static void flush_reply(fuse_req_t req, struct fuse_file_info *fi, enum ofile_flush_why why)
{
    struct fs_store *s = ops_store(req);
    struct ofile *f = ops_ofile(fi);
    /* Held for the whole save, by the rule of ops_content.c: a cut
     * edit's save downloads (handing the device to another thread), and
     * a save goes on after its early answer.  (The two do not meet today:
     * a cut edit's close answers at its end, so this descriptor's RELEASE
     * cannot run first; the hold keeps that from mattering.) */
    ofile_hold(f);
    struct early e = {req, false};
    struct cache_then then = {answer_early, &e};
    int rc = f ? ops_save(s, f, ops_fh_edit(fi), why, why == OFILE_CLOSE ? &then : NULL) : 0;
    if (rc && rc != -EFBIG) /* EFBIG: a cut edit, kept as a record and logged */
        log_error("failed to save a file to the cache", "memory_store_id", s->id, "error",
                  strerror(-rc));
    if (!e.sent)
        fuse_reply_err(req, -rc);
    ofile_put(f);
}

/* A read-only descriptor's close or fsync saves nothing a writer still
 * has open (OFILE_READER): `cat` or `sync FILE` beside an editor must not
 * make its half-written file pushable. */
void ops_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    flush_reply(req, fi, ops_fh_writer(fi) ? OFILE_CLOSE : OFILE_READER);
}

void ops_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    flush_reply(req, fi, ops_fh_writer(fi) ? OFILE_SYNC : OFILE_READER);
}

void ops_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    /* Most directory changes are committed before their replies; an open's
     * new file is committed a few milliseconds later (cache/saved.c):
     * now, so the entry survives a kill -9 once fsync(2) returns. */
    struct fs_store *s = ops_store(req);
    int rc = cache_settle(s->cache);
    if (rc)
        log_error("cannot commit the cache's recent changes for a directory's fsync",
                  "memory_store_id", s->id, "error", strerror(-rc));
    fuse_reply_err(req, -rc);
}

void ops_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                   struct fuse_file_info *fi)
{
    struct fs_store *s = ops_store(req);
    if (refuse_ro(req))
        return;
    if (ino == CACHE_INO_MARKER) {
        fuse_reply_err(req, EPERM);
        return;
    }
    if (mode != 0 || offset < 0 || length <= 0) {
        fuse_reply_err(req, mode != 0 ? EOPNOTSUPP : EINVAL);
        return;
    }
    struct ofile *f = ops_ofile(fi);
    uint64_t end = (uint64_t)offset + (uint64_t)length;
    int rc = f ? 0 : -EBADF;
    if (!rc && end > MEM_CONTENT_MAX_BYTES) {
        rc = -EFBIG;
    } else if (!rc) {
        struct cnode n = {0};
        rc = ops_getnode(s, f->row, &n);
        uint64_t size = n.size;
        if (!rc)
            cnode_clear(&n);
        bool dropped; /* an open handle's: never set */
        if (!rc && end > size)
            rc = resize(s, f->row, f, ops_fh_edit(fi), end, &dropped);
    }
    fuse_reply_err(req, -rc);
}

