/* ops.c - the FUSE low-level operations of one mounted store.
 *
 * Inode numbers are cache row ids (fs_to_row/fs_to_kernel map the store
 * root to FUSE_ROOT_ID); CACHE_INO_MARKER is the virtual marker file at the
 * root.  The kernel's lookup counts need no bookkeeping here: a node
 * removed while the kernel may still know it stays in the cache (unlinked)
 * until the next cache_open, so an inode number always resolves.
 *
 * Open files: open loads the content (downloading it first if the cache
 * does not have it) into a struct fh; read serves from it; release frees
 * it.  keep_cache lets the kernel keep pages across opens: the sync engine
 * invalidates exactly the inodes whose content changed (notify.c).
 *
 * Mutating operations are refused with EROFS on a read-only store (the
 * kernel's ro mount refuses first; this is the second wall). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "cache.h"
#include "engine.h"
#include "fs.h"
#include "log.h"
#include "rules.h"

/* Remote changes are pushed into the kernel by notify.c, so the kernel may
 * keep names and attributes for a long time. */
#define FS_TIMEOUT 3600.0

struct fh {
    char *buf;
    size_t len;
};

static struct fs_store *store_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static void fill_attr(const struct fs_store *s, const struct cnode *n, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = fs_to_kernel(s, n->ino);
    if (n->is_dir) {
        st->st_mode = S_IFDIR | (s->read_only ? 0555 : 0755);
        st->st_nlink = 2;
        st->st_size = 4096;
    } else {
        st->st_mode = S_IFREG | (s->read_only ? 0444 : 0644);
        st->st_nlink = 1;
        st->st_size = (off_t)n->size;
    }
    st->st_uid = s->uid;
    st->st_gid = s->gid;
    st->st_blksize = 4096;
    st->st_blocks = (st->st_size + 511) / 512;
    st->st_mtim.tv_sec = n->mtime_ns / 1000000000LL;
    st->st_mtim.tv_nsec = n->mtime_ns % 1000000000LL;
    st->st_ctim.tv_sec = n->ctime_ns / 1000000000LL;
    st->st_ctim.tv_nsec = n->ctime_ns % 1000000000LL;
    st->st_atim = st->st_mtim;
}

static void marker_attr(const struct fs_store *s, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = CACHE_INO_MARKER;
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = (off_t)s->marker_len;
    st->st_uid = s->uid;
    st->st_gid = s->gid;
    st->st_blksize = 4096;
    st->st_blocks = 1;
}

static bool is_marker(const struct fs_store *s, uint64_t parent_row, const char *name)
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
    if (is_marker(s, prow, name)) {
        e.ino = CACHE_INO_MARKER;
        marker_attr(s, &e.attr);
        fuse_reply_entry(req, &e);
        return;
    }
    struct cnode n;
    int rc = cache_lookup(s->cache, prow, name, &n);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    e.ino = fs_to_kernel(s, n.ino);
    fill_attr(s, &n, &e.attr);
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

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs_store *s = store_of(req);
    struct stat st;
    if (ino == CACHE_INO_MARKER) {
        marker_attr(s, &st);
        fuse_reply_attr(req, &st, FS_TIMEOUT);
        return;
    }
    struct cnode n;
    int rc = cache_getattr(s->cache, fs_to_row(s, ino), &n);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    fill_attr(s, &n, &st);
    cnode_clear(&n);
    fuse_reply_attr(req, &st, FS_TIMEOUT);
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

/* Adds one entry; returns 1 when the buffer is full (entry not added). */
static int dir_add(struct dirbuf *d, const char *name, const struct stat *st, off_t next)
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
        bool dot = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
        if (dot)
            e.ino = 0; /* no lookup count for . and .. */
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
    return dir_add(d, n->name, &st, (off_t)(n->ino + OFF_CHILD_BASE));
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
        full = dir_add(&d, ".", &st, 1);
    if (!full && off < 2) {
        struct stat up = st;
        up.st_ino = FUSE_ROOT_ID; /* the parent's number is not needed by anyone */
        full = dir_add(&d, "..", &up, 2);
    }
    if (!full && off < OFF_CHILD_BASE && row == s->root) {
        marker_attr(s, &st);
        full = dir_add(&d, MEM_MARKER_NAME, &st, OFF_CHILD_BASE);
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
    fi->cache_readdir = 0;
    fuse_reply_open(req, fi);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fuse_reply_err(req, 0);
}

/* Loads a file's bytes, downloading them when the cache lacks them. */
static int load_content(struct fs_store *s, const struct cnode *n, struct fh *fh)
{
    if (!n->sha[0]) {
        fh->buf = strdup("");
        fh->len = 0;
        return fh->buf ? 0 : -ENOMEM;
    }
    int rc = cache_blob_get(s->cache, n->sha, &fh->buf, &fh->len);
    if (rc != -ENOENT)
        return rc;
    if (!n->memory_id[0])
        return -EIO;
    rc = syncer_fetch(s->sync, s->sync_idx, n->memory_id, n->sha);
    if (rc)
        return rc;
    return cache_blob_get(s->cache, n->sha, &fh->buf, &fh->len);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs_store *s = store_of(req);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        fuse_reply_err(req, ino == CACHE_INO_MARKER ? EPERM : EROFS);
        return;
    }
    struct fh *fh = calloc(1, sizeof(*fh));
    if (!fh) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int rc = 0;
    if (ino == CACHE_INO_MARKER) {
        fh->buf = malloc(s->marker_len + 1);
        if (fh->buf) {
            memcpy(fh->buf, s->marker, s->marker_len);
            fh->len = s->marker_len;
        } else {
            rc = -ENOMEM;
        }
    } else {
        struct cnode n;
        rc = cache_getattr(s->cache, fs_to_row(s, ino), &n);
        if (!rc) {
            rc = n.is_dir ? -EISDIR : load_content(s, &n, fh);
            if (rc && rc != -EISDIR)
                log_warn("failed to fetch memory content", "memory_store_id", s->id, "path",
                         n.path, "error", strerror(-rc));
            cnode_clear(&n);
        }
    }
    if (rc) {
        free(fh->buf);
        free(fh);
        fuse_reply_err(req, -rc == ENOENT ? EIO : -rc);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)fh;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct fh *fh = (struct fh *)(uintptr_t)fi->fh;
    if (off < 0 || (size_t)off >= fh->len) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    size_t n = fh->len - (size_t)off;
    fuse_reply_buf(req, fh->buf + off, n < size ? n : size);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fh *fh = (struct fh *)(uintptr_t)fi->fh;
    if (fh) {
        free(fh->buf);
        free(fh);
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
    sv.f_namemax = MEM_PATH_MAX_BYTES - 1;
    fuse_reply_statfs(req, &sv);
}

/* Until local writes land in the cache, every mutating call is refused:
 * EROFS on any store, EPERM on the marker. */
static void refuse(fuse_req_t req, fuse_ino_t ino)
{
    fuse_reply_err(req, ino == CACHE_INO_MARKER ? EPERM : EROFS);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    refuse(req, ino);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    refuse(req, parent);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    refuse(req, parent);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fs_store *s = store_of(req);
    refuse(req, is_marker(s, fs_to_row(s, parent), name) ? CACHE_INO_MARKER : parent);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    refuse(req, parent);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    refuse(req, parent);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    struct fs_store *s = store_of(req);
    refuse(req, is_marker(s, fs_to_row(s, parent), name) ? CACHE_INO_MARKER : parent);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    refuse(req, ino);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    struct fs_store *s = store_of(req);
    refuse(req, is_marker(s, fs_to_row(s, parent), name) ? CACHE_INO_MARKER : parent);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    refuse(req, ino);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    struct fs_store *s = store_of(req);
    fuse_reply_err(req, s->read_only ? EROFS : ENOTSUP);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    struct fs_store *s = store_of(req);
    fuse_reply_err(req, s->read_only ? EROFS : ENOTSUP);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    fuse_reply_err(req, ENODATA);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    if (size == 0)
        fuse_reply_xattr(req, 0);
    else
        fuse_reply_buf(req, NULL, 0);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                         struct fuse_file_info *fi)
{
    refuse(req, ino);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    if (conn->capable & FUSE_CAP_EXPORT_SUPPORT)
        conn->want &= ~FUSE_CAP_EXPORT_SUPPORT;
}

const struct fuse_lowlevel_ops fs_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .release = op_release,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .releasedir = op_releasedir,
    .statfs = op_statfs,
    .setxattr = op_setxattr,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .removexattr = op_removexattr,
    .create = op_create,
    .fallocate = op_fallocate,
};
