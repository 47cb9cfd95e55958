/* xattr.c - the extended attributes of a mount: read-only
 * user.memstore.* on every file (docs/history.md), nothing else.
 *
 *   user.memstore.memory_id   the memory behind the file (absent: never synced)
 *   user.memstore.version_id  the store version its baseline is (absent: unknown)
 *   user.memstore.updated_at  that version's time, RFC 3339 UTC (absent: unknown)
 *   user.memstore.sha256      SHA-256 of the content the cache holds
 *   user.memstore.state       clean | dirty | refused | conflict
 *
 * Directories and the marker have none.  Setting or removing any
 * attribute is ENOTSUP (EROFS on a read-only store), user.memstore.*
 * included: they describe the store, which a file cannot change, and
 * ENOTSUP is what tools that copy attributes (cp -a, rsync -X, tar
 * --xattrs) take as "this filesystem keeps none" and pass over quietly,
 * where EPERM would make them report an error for every file copied
 * within a mount.  A getxattr of another name is answered at once,
 * without touching the cache:
 *  - another user.* name: ENODATA, the name is not set;
 *  - any other namespace (security.*, trusted.*, system.*, the POSIX ACLs
 *    included): ENOTSUP, the namespace is not kept here, as on a
 *    filesystem without a handler for it (or, for the ACLs, built without
 *    ACL support: getfacl shows the modes as the ACL).  ls -l asks
 *    security.selinux and system.posix_acl_access of every file and takes
 *    ENOTSUP as "not on this device", asking no more for the rest of its
 *    run: two GETXATTRs for a whole ls -lR instead of two a file.  The
 *    kernel asks the daemon for an ACL only when a program does: without
 *    FUSE_CAP_POSIX_ACL (ops.c) it never reads ACLs for its own checks.
 *    Its security.capability check before an inode's first write
 *    (fuseio.c, KILLPRIV_V2) reads ENOTSUP as "none". */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "fs.h"
#include "xattr.h"

#define PREFIX "user.memstore."

static const char *const names[] = {
    PREFIX "memory_id", PREFIX "version_id", PREFIX "updated_at", PREFIX "sha256", PREFIX "state",
};
#define N_NAMES (sizeof(names) / sizeof(names[0]))

static bool ours(const char *name)
{
    return strncmp(name, PREFIX, sizeof(PREFIX) - 1) == 0;
}

/* A name of a namespace the mount keeps (empty here but for ours). */
static bool kept_namespace(const char *name)
{
    return strncmp(name, "user.", 5) == 0;
}

/* The value of attribute i ("" when the file has none). */
static void value_of(size_t i, const struct cache_file_history *h, char *out, size_t len)
{
    out[0] = '\0';
    switch (i) {
    case 0:
        snprintf(out, len, "%s", h->memory_id);
        break;
    case 1:
        snprintf(out, len, "%s", h->version_id);
        break;
    case 2:
        if (h->updated_ns > 0) {
            time_t t = (time_t)(h->updated_ns / 1000000000LL);
            struct tm tm;
            gmtime_r(&t, &tm);
            size_t n = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
            snprintf(out + n, len - n, ".%03dZ", (int)(h->updated_ns % 1000000000LL / 1000000));
        }
        break;
    case 3:
        snprintf(out, len, "%s", h->sha);
        break;
    default:
        snprintf(out, len, "%s", cache_state_name(h->state));
        break;
    }
}

/* The file's attributes, or a positive errno (ENODATA: it has none). */
static int history_of(fuse_req_t req, fuse_ino_t ino, struct cache_file_history *h)
{
    struct fs_store *s = fuse_req_userdata(req);
    if (ino == CACHE_INO_MARKER)
        return ENODATA;
    int rc = cache_file_history(s->cache, fs_to_row(s, ino), h);
    return rc == -EISDIR ? ENODATA : -rc;
}

static void reply_value(fuse_req_t req, const char *v, size_t size)
{
    size_t n = strlen(v);
    if (size == 0)
        fuse_reply_xattr(req, n);
    else if (size < n)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, v, n);
}

void xattr_get(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    if (((struct fs_store *)fuse_req_userdata(req))->no_xattrs) {
        /* --no-xattrs: the kernel stops asking (no round trip for the
         * security.capability check of every write, nor for ls -l). */
        fuse_reply_err(req, ENOSYS);
        return;
    }
    if (!ours(name)) {
        fuse_reply_err(req, kept_namespace(name) ? ENODATA : ENOTSUP);
        return;
    }
    size_t i = 0;
    while (i < N_NAMES && strcmp(names[i], name) != 0)
        i++;
    struct cache_file_history h;
    int err = i < N_NAMES ? history_of(req, ino, &h) : ENODATA;
    char v[CACHE_ID_MAX + 64];
    if (!err) {
        value_of(i, &h, v, sizeof(v));
        err = v[0] ? 0 : ENODATA;
    }
    if (err)
        fuse_reply_err(req, err);
    else
        reply_value(req, v, size);
}

void xattr_list(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    if (((struct fs_store *)fuse_req_userdata(req))->no_xattrs) {
        fuse_reply_err(req, ENOSYS);
        return;
    }
    struct cache_file_history h;
    int err = history_of(req, ino, &h);
    if (err == ENODATA) {
        if (size == 0)
            fuse_reply_xattr(req, 0);
        else
            fuse_reply_buf(req, NULL, 0);
        return;
    }
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    char buf[256];
    size_t n = 0;
    for (size_t i = 0; i < N_NAMES; i++) {
        char v[CACHE_ID_MAX + 64];
        value_of(i, &h, v, sizeof(v));
        if (!v[0])
            continue;
        size_t k = strlen(names[i]) + 1;
        memcpy(buf + n, names[i], k);
        n += k;
    }
    if (size == 0)
        fuse_reply_xattr(req, n);
    else if (size < n)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, buf, n);
}

/* No attribute can ever be set or removed.  ENOSYS tells the kernel so
 * for the whole connection: it answers this call and every later one
 * EOPNOTSUPP (ENOTSUP) itself, so `cp -a`, `rsync -X` and `sed -i` (which
 * copy a file's ACL) cost no round trip for it.  A read-only store says
 * EROFS, as every change there (the kernel refuses first: `ro` mount). */
void xattr_set(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
               int flags)
{
    struct fs_store *s = fuse_req_userdata(req);
    fuse_reply_err(req, s->read_only ? EROFS : ENOSYS);
}

void xattr_remove(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    struct fs_store *s = fuse_req_userdata(req);
    fuse_reply_err(req, s->read_only ? EROFS : ENOSYS);
}
