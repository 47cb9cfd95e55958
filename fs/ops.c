/* ops.c - the FUSE low-level operations of one mounted store that read:
 * lookup, getattr, readdir, open, read, release, statfs, and the
 * operation table (the changes are in ops_write.c, the extended
 * attributes in xattr.c).
 *
 * Inode numbers are cache row ids (fs_to_row/fs_to_kernel map the store
 * root to FUSE_ROOT_ID); CACHE_INO_MARKER is the virtual marker file at the
 * root.  The kernel's lookup counts need no bookkeeping here: a node
 * removed while the kernel may still know it stays in the cache (unlinked)
 * until the next cache_open, so an inode number always resolves.
 *
 * Open files: every open of a file shares the inode's struct ofile
 * (openfile.c), loaded from the cache at open (downloading the content
 * first if the cache does not have it: ops_content.c); a reader's fi->fh
 * points to it, a writer's to a struct ops_writer (the ofile and the edit
 * it joined), with the low bit set (ops.h, OPS_FH_WRITER; 0 for the
 * marker, whose bytes are served from the store).  read serves from it,
 * so a reader sees what a writer wrote; release flushes and drops it.
 * keep_cache lets the kernel keep pages across opens: the sync engine
 * invalidates exactly the inodes whose content changed (notify.c), and
 * local writes go through the kernel, which keeps its pages right. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "ops.h"
#include "rules.h"
#include "warm.h"
#include "xattr.h"

unsigned ops_pause_open_ms;

#define store_of ops_store
#define fill_attr ops_fill_attr
#define is_marker ops_is_marker

mode_t ops_mode(const struct fs_store *s, bool is_dir)
{
    if (is_dir)
        return (s->read_only ? 0555 : 0755) & ~s->umask;
    return (s->read_only ? 0444 : 0644) & ~s->umask;
}

struct timespec ops_ns_to_timespec(int64_t ns)
{
    /* Floor division: a time before 1970 keeps 0 <= tv_nsec < 1e9. */
    int64_t sec = ns / 1000000000LL, rem = ns % 1000000000LL;
    if (rem < 0) {
        sec--;
        rem += 1000000000LL;
    }
    return (struct timespec){.tv_sec = (time_t)sec, .tv_nsec = (long)rem};
}

int64_t ops_timespec_to_ns(const struct timespec *ts)
{
    /* Nanoseconds since 1970 in 64 bits reach the years 1678 to 2262: a
     * time outside is clamped, as a local filesystem clamps to its range. */
    const int64_t max_sec = INT64_MAX / 1000000000LL - 1;
    if (ts->tv_sec > max_sec)
        return max_sec * 1000000000LL;
    if (ts->tv_sec < -max_sec)
        return -max_sec * 1000000000LL;
    return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

void ops_fill_attr(const struct fs_store *s, const struct cnode *n, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = fs_to_kernel(s, n->ino);
    if (n->is_dir) {
        st->st_mode = S_IFDIR | ops_mode(s, true);
        /* "." and the entry in its parent, and each subdirectory's "..". */
        st->st_nlink = n->unlinked ? 0 : 2 + (nlink_t)n->subdirs;
        st->st_size = 4096;
    } else {
        st->st_mode = S_IFREG | ops_mode(s, false);
        st->st_nlink = n->unlinked ? 0 : 1;
        st->st_size = (off_t)n->size;
    }
    st->st_uid = s->uid;
    st->st_gid = s->gid;
    st->st_blksize = 4096;
    st->st_blocks = (st->st_size + 511) / 512;
    st->st_mtim = ops_ns_to_timespec(n->mtime_ns);
    st->st_ctim = ops_ns_to_timespec(n->ctime_ns);
    st->st_atim = ops_ns_to_timespec(n->atime_ns);
}

static void marker_attr(const struct fs_store *s, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = CACHE_INO_MARKER;
    st->st_mode = S_IFREG | (0444 & ~s->umask);
    st->st_nlink = 1;
    st->st_size = (off_t)s->marker_len;
    st->st_uid = s->uid;
    st->st_gid = s->gid;
    st->st_blksize = 4096;
    st->st_blocks = 1;
    st->st_mtim = st->st_ctim = st->st_atim = s->mounted_at;
}

int ops_getnode(struct fs_store *s, uint64_t row, struct cnode *n)
{
    struct ofile *f = ofile_find(row);
    if (!f)
        return cache_getattr(s->cache, row, n);
    /* Under the buffer's lock no flush can run between reading the node
     * and reading the buffer, so the size reported is never older than
     * what the kernel already wrote (it would then append at a stale
     * offset). */
    ofile_lock(f);
    int rc = cache_getattr(s->cache, row, n);
    if (!rc && !n->is_dir)
        ofile_attr_locked(f, &n->size, &n->mtime_ns, &n->ctime_ns);
    ofile_unlock(f);
    ofile_put(f);
    return rc;
}

void ops_fill_entry(const struct fs_store *s, const struct cnode *n, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof(*e));
    e->attr_timeout = FS_TIMEOUT;
    e->entry_timeout = FS_TIMEOUT;
    e->ino = fs_to_kernel(s, n->ino);
    fill_attr(s, n, &e->attr);
}

bool ops_is_marker(const struct fs_store *s, uint64_t parent_row, const char *name)
{
    return parent_row == s->root && strcmp(name, MEM_MARKER_NAME) == 0;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fs_store *s = store_of(req);
    struct fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    e.attr_timeout = FS_TIMEOUT;
    e.entry_timeout = FS_TIMEOUT;
    uint64_t prow = fs_to_row(s, parent);
    if (strlen(name) > MEM_NAME_MAX_BYTES) {
        /* No such name can exist here: every operation on it (rmdir,
         * unlink, rename, truncate, open, ...) ends at this lookup. */
        fuse_reply_err(req, ENAMETOOLONG);
        return;
    }
    if (is_marker(s, prow, name)) {
        e.ino = CACHE_INO_MARKER;
        marker_attr(s, &e.attr);
        fuse_reply_entry(req, &e);
        return;
    }
    struct cnode n;
    int rc = cache_lookup(s->cache, prow, name, &n);
    if (!rc && !n.is_dir) {
        /* Read it again the way getattr does: an open buffer wins. */
        uint64_t row = n.ino;
        cnode_clear(&n);
        rc = ops_getnode(s, row, &n);
    }
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    ops_fill_entry(s, &n, &e);
    cnode_clear(&n);
    fuse_reply_entry(req, &e);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    fuse_reply_none(req);
}

/* The attributes of kernel inode ino, the marker's included: 0 or -errno. */
static int attr_of(struct fs_store *s, fuse_ino_t ino, struct stat *st)
{
    if (ino == CACHE_INO_MARKER) {
        marker_attr(s, st);
        return 0;
    }
    struct cnode n;
    int rc = ops_getnode(s, fs_to_row(s, ino), &n);
    if (rc)
        return rc;
    fill_attr(s, &n, st);
    cnode_clear(&n);
    return 0;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct stat st;
    int rc = attr_of(store_of(req), ino, &st);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, FS_TIMEOUT);
}

/* access(2) and chdir: the kernel asks only a mount without its own mode
 * checks (fsmount.c, needs_mode_checks), and the answer is the one those
 * checks would give: root may read and write anything and execute what has
 * an x bit (a directory always), the others as the modes' owner, group
 * (the primary group: only the owner gets into such a mount) or other bits
 * allow; writing to a read-only store is EROFS. */
static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    struct fs_store *s = store_of(req);
    struct stat st;
    int rc = attr_of(s, ino, &st);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    bool dir = S_ISDIR(st.st_mode);
    mode_t mode = st.st_mode & 07777;
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    int err = 0;
    if ((mask & W_OK) && s->read_only)
        err = EROFS;
    else if (ctx->uid == 0)
        err = (mask & X_OK) && !dir && !(mode & 0111) ? EACCES : 0;
    else {
        mode_t bits = ctx->uid == s->uid ? mode >> 6 : ctx->gid == s->gid ? mode >> 3 : mode;
        err = (mask & (R_OK | W_OK | X_OK)) & ~bits ? EACCES : 0;
    }
    fuse_reply_err(req, err);
}

/* Directory offsets: 1 after ".", 2 after "..", 3 after the marker (root
 * only), and child row + 3 after each child (rows are > 2, children are
 * listed in row order, so offsets only grow). */
#define OFF_CHILD_BASE 3

struct dirbuf {
    fuse_req_t req;
    struct fs_store *s;
    char *buf;
    size_t size, len;
    bool plus;
};

/* Adds one entry; returns 1 when the buffer is full (entry not added).
 * With link false a readdirplus entry carries no attributes (the kernel
 * then neither counts a lookup nor updates the inode). */
static int dir_add(struct dirbuf *d, const char *name, const struct stat *st, off_t next,
                   bool link)
{
    size_t room = d->size - d->len;
    size_t need;
    if (d->plus) {
        struct fuse_entry_param e;
        memset(&e, 0, sizeof(e));
        e.attr = *st;
        e.ino = st->st_ino;
        e.attr_timeout = FS_TIMEOUT;
        e.entry_timeout = FS_TIMEOUT;
        if (!link)
            e.ino = 0;
        need = fuse_add_direntry_plus(d->req, d->buf + d->len, room, name, &e, next);
    } else {
        need = fuse_add_direntry(d->req, d->buf + d->len, room, name, st, next);
    }
    if (need > room)
        return 1;
    d->len += need;
    return 0;
}

static int dir_child(void *arg, const struct cnode *n)
{
    struct dirbuf *d = arg;
    struct stat st;
    fill_attr(d->s, n, &st);
    /* An open file's size is its buffer's, which cannot be read here (the
     * cache lock is held): leave its attributes to lookup/getattr. */
    bool link = n->is_dir || !ofile_is_open(n->ino);
    return dir_add(d, n->name, &st, (off_t)(n->ino + OFF_CHILD_BASE), link);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
    struct fs_store *s = store_of(req);
    uint64_t row = fs_to_row(s, ino);
    struct cnode self;
    int rc = cache_getattr(s->cache, row, &self);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    if (!self.is_dir) {
        cnode_clear(&self);
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    struct dirbuf d = {.req = req, .s = s, .size = size, .plus = plus};
    d.buf = malloc(size ? size : 1);
    if (!d.buf) {
        cnode_clear(&self);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    struct stat st;
    fill_attr(s, &self, &st);
    cnode_clear(&self);
    bool full = false;
    if (off < 1)
        full = dir_add(&d, ".", &st, 1, false);
    if (!full && off < 2) {
        struct stat up = st;
        up.st_ino = FUSE_ROOT_ID; /* the parent's number is not needed by anyone */
        full = dir_add(&d, "..", &up, 2, false);
    }
    if (!full && off < OFF_CHILD_BASE && row == s->root) {
        marker_attr(s, &st);
        full = dir_add(&d, MEM_MARKER_NAME, &st, OFF_CHILD_BASE, true);
    }
    if (!full) {
        uint64_t after = off > OFF_CHILD_BASE ? (uint64_t)off - OFF_CHILD_BASE : 0;
        rc = cache_readdir(s->cache, row, after, dir_child, &d);
        if (rc < 0 && d.len == 0) {
            free(d.buf);
            fuse_reply_err(req, -rc);
            return;
        }
    }
    fuse_reply_buf(req, d.buf, d.len);
    free(d.buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, true);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs_store *s = store_of(req);
    if (s->no_opendir) {
        /* No state per open directory: the kernel may open directories
         * without asking (it then caches their listings and keeps them
         * across opens; notify.c drops them on remote changes). */
        fuse_reply_err(req, ENOSYS);
        return;
    }
    struct cnode n;
    int rc = cache_getattr(s->cache, fs_to_row(s, ino), &n);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    bool dir = n.is_dir;
    cnode_clear(&n);
    if (!dir) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fuse_reply_err(req, 0);
}

/* Every writer's handle, linked while the kernel holds it. */
static pthread_mutex_t writers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ops_writer *writers; /* guarded by writers_lock */

void ops_set_fh(struct fuse_file_info *fi, struct ofile *f, struct ops_writer *w)
{
    if (!w) {
        fi->fh = (uint64_t)(uintptr_t)f;
        return;
    }
    w->f = f;
    w->edit = ofile_join(f);
    pthread_mutex_lock(&writers_lock);
    w->prev = NULL;
    w->next = writers;
    if (writers)
        writers->prev = w;
    writers = w;
    pthread_mutex_unlock(&writers_lock);
    fi->fh = (uint64_t)(uintptr_t)w | OPS_FH_WRITER;
}

void ops_fh_free(struct fuse_file_info *fi)
{
    struct ops_writer *w = ops_fh_writer_of(fi);
    if (w) {
        pthread_mutex_lock(&writers_lock);
        if (w->prev)
            w->prev->next = w->next;
        else
            writers = w->next;
        if (w->next)
            w->next->prev = w->prev;
        pthread_mutex_unlock(&writers_lock);
        free(w);
    }
    fi->fh = 0;
}

/* Gives back the writer an open that is not answered counted.  The last
 * one out saves the buffer as finished, as a release would: a writer that
 * released meanwhile was not the last, and its close saved held. */
static void writer_undo(struct fs_store *s, struct ofile *f, bool writing)
{
    if (writing && ofile_writer_release(f, OFILE_ANY)) { /* joined no edit yet */
        int rc = ops_save(s, f, OFILE_ANY, OFILE_LAST, NULL);
        if (rc && rc != -EFBIG)
            log_error("failed to save a closed file to the cache", "memory_store_id", s->id,
                      "error", strerror(-rc));
    }
}

/* Opens the file at row for fi's flags (O_TRUNC included): its handle
 * set in fi, with keep_cache and noflush.  0, or a negative errno with
 * nothing held.  open_undo gives back what an unanswered open holds. */
static int open_row(struct fs_store *s, uint64_t row, struct fuse_file_info *fi)
{
    bool writing = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
    if (writing && s->read_only)
        return -EROFS;
    struct ops_writer *w = writing ? malloc(sizeof(*w)) : NULL;
    struct ofile *f = writing && !w ? NULL : ofile_get(row);
    if (!f) {
        free(w);
        return -ENOMEM;
    }
    int rc = 0;
    bool reader = (fi->flags & O_ACCMODE) == O_RDONLY && !writing;
    /* A new writer starts from the store's version, not from an edit that
     * lost to it which earlier writers still hold, nor from one a write
     * past the size limit cut short (openfile.c). */
    bool dropped = false;
    if (writing && (rc = ops_take_over(s, f, &dropped)) != 0) {
        free(w);
        ofile_put(f);
        return rc;
    }
    /* A writer counts from before its buffer is read: a restore (which
     * refuses a file open for writing, fs/restore.c) must not replace the
     * content between this open's read and its first write. */
    if (writing)
        ofile_writer_open(f);
    if (reader && warm_has(f->row)) {
        /* Content known to be in the cache: nothing to ask it now; the
         * kernel keeps its pages, and a read it still sends loads them
         * (op_read). */
    } else if (writing && (fi->flags & O_TRUNC)) {
        struct cnode n;
        rc = cache_getattr(s->cache, f->row, &n);
        if (!rc) {
            rc = n.is_dir ? -EISDIR : ofile_truncate(f, OFILE_ANY, 0, ops_now_ns(), s->cache);
            if (!rc)
                ofile_set_origin(f, n.sha, strcmp(n.sha, n.base_sha) != 0);
            cnode_clear(&n);
        }
    } else {
        rc = ops_load(s, f);
        if (!rc)
            warm_add(f->row);
    }
    if (rc) {
        /* The kernel's pages of a lost edit this open dropped go all the
         * same; and a writer that released while this one counted saved
         * held what this one's release now finishes. */
        if (dropped)
            fs_notify_reverted(s, f->row);
        writer_undo(s, f, writing);
        free(w);
        ofile_put(f);
        return rc;
    }
    /* The kernel's pages and size were the lost edit's: dropped before
     * the answer, so that the opener's first read (which the kernel
     * clips to a size it thinks current) sees the store's version.  An
     * open holds no page of the inode locked. */
    if (dropped)
        fs_notify_reverted(s, f->row);
    /* The handle joins the edit in progress once its own truncate or load
     * is done: one given up meanwhile is not its. */
    ops_set_fh(fi, f, w);
    fi->keep_cache = !dropped; /* the kernel's pages held the lost edit */
    /* A reader has nothing to save at close: no FLUSH round trip. */
    fi->noflush = reader;
    return 0;
}

/* An open answered too late (its caller gave up): its writer goes without
 * a save, as before 5 December 2026; an O_TRUNC open's emptied buffer
 * would otherwise be saved and pushed for an open nobody got. */
static void open_undo(struct fuse_file_info *fi)
{
    struct ofile *f = ops_ofile(fi);
    if (ops_fh_writer(fi))
        ofile_writer_release(f, ops_fh_edit(fi));
    ops_fh_free(fi);
    ofile_put(f);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs_store *s = store_of(req);
    if (ino == CACHE_INO_MARKER) {
        bool writing = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
        if (writing) {
            fuse_reply_err(req, s->read_only ? EROFS : EPERM);
            return;
        }
        fi->fh = 0;
        fi->keep_cache = 1;
        fuse_reply_open(req, fi);
        return;
    }
    int rc = open_row(s, fs_to_row(s, ino), fi);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    /* Once answered, the opener may close at once, and an open that
     * downloaded has handed the device to another thread (fsloop.c),
     * which may run that close's RELEASE, freeing the handle and the
     * handle's reference, before this thread goes on: the file is held
     * here by a reference of its own. */
    struct ofile *adopt = ops_fh_writer(fi) && !(fi->flags & O_TRUNC) ? ops_ofile(fi) : NULL;
    ofile_hold(adopt);
    if (fuse_reply_open(req, fi) != 0) {
        open_undo(fi); /* the open was interrupted: no release will come */
    } else {
        if (ops_pause_open_ms)
            usleep(ops_pause_open_ms * 1000u);
        if (adopt)
            ofile_adopt_new(adopt); /* once answered: an open nobody got saves nothing */
    }
    ofile_put(adopt);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct fs_store *s = store_of(req);
    if (ino == CACHE_INO_MARKER) {
        if (off < 0 || (size_t)off >= s->marker_len) {
            fuse_reply_buf(req, NULL, 0);
            return;
        }
        size_t n = s->marker_len - (size_t)off;
        fuse_reply_buf(req, s->marker + off, n < size ? n : size);
        return;
    }
    char *buf = NULL;
    size_t n = 0;
    int rc = off < 0 ? -EINVAL : ofile_read(ops_ofile(fi), (uint64_t)off, size, &buf, &n);
    if (rc == -EIO && ops_load(store_of(req), ops_ofile(fi)) == 0) /* unloaded: the store won */
        rc = ofile_read(ops_ofile(fi), (uint64_t)off, size, &buf, &n);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, buf, n);
    free(buf);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs_store *s = store_of(req);
    struct ofile *f = ops_ofile(fi);
    if (f) {
        bool writer = ops_fh_writer(fi);
        bool last = writer && ofile_writer_release(f, ops_fh_edit(fi));
        /* The last writer's release finishes whatever edit the buffer
         * holds: the one writers still open belonged to ended with them. */
        int rc = ops_save(s, f, last ? OFILE_ANY : ops_fh_edit(fi),
                          !writer ? OFILE_READER : last ? OFILE_LAST : OFILE_CLOSE, NULL);
        if (rc && rc != -EFBIG) /* EFBIG: a cut edit, kept as a record and logged */
            log_error("failed to save a closed file to the cache", "memory_store_id", s->id,
                      "error", strerror(-rc));
        ops_fh_free(fi);
        ofile_put(f);
    }
    fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct fs_store *s = store_of(req);
    struct cache_store_stats cs;
    struct statvfs sv;
    memset(&sv, 0, sizeof(sv));
    if (cache_store_stats(s->cache, s->id, &cs) != 0)
        memset(&cs, 0, sizeof(cs));
    /* Capacity: the 10,000-memory cap of a store, 100 KiB each. */
    const uint64_t max_files = 10000;
    const uint64_t blocks = max_files * (MEM_CONTENT_MAX_BYTES / 4096);
    uint64_t used = (cs.bytes + 4095) / 4096;
    sv.f_bsize = 4096;
    sv.f_frsize = 4096;
    sv.f_blocks = blocks;
    sv.f_bfree = sv.f_bavail = used < blocks ? blocks - used : 0;
    sv.f_files = max_files;
    sv.f_ffree = sv.f_favail = cs.files < max_files ? max_files - cs.files : 0;
    sv.f_namemax = MEM_NAME_MAX_BYTES;
    fuse_reply_statfs(req, &sv);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct fs_store *s = userdata;
    s->no_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
    if (conn->capable & FUSE_CAP_EXPORT_SUPPORT)
        conn->want &= ~FUSE_CAP_EXPORT_SUPPORT;
    /* No FUSE_CAP_POSIX_ACL: the mount keeps no ACLs (getting or setting
     * one is ENOTSUP, xattr.c), and the kernel would turn its own mode
     * checks on with it, which a private mount leaves out (fsmount.c). */
    conn->want &= ~FUSE_CAP_POSIX_ACL;
}

const struct fuse_lowlevel_ops fs_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .access = op_access,
    .setattr = ops_setattr,
    .mknod = ops_mknod,
    .mkdir = ops_mkdir,
    .unlink = ops_unlink,
    .rmdir = ops_rmdir,
    .symlink = ops_symlink,
    .rename = ops_rename,
    .link = ops_link,
    .open = op_open,
    .read = op_read,
    .write = ops_write,
    .flush = ops_flush,
    .release = op_release,
    .fsync = ops_fsync,
    .fsyncdir = ops_fsyncdir,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .releasedir = op_releasedir,
    .statfs = op_statfs,
    .setxattr = xattr_set,
    .getxattr = xattr_get,
    .listxattr = xattr_list,
    .removexattr = xattr_remove,
    .create = ops_create,
    .fallocate = ops_fallocate,
};
