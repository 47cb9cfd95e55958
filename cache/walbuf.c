/* walbuf.c - the cache's SQLite VFS: the default one (unix), except that
 * the many small writes of a WAL commit reach the file system as one.
 *
 * SQLite appends a commit to the write-ahead log as two write(2)s a page
 * (a 24-byte frame header, then the page): a new file's commit is about
 * 13 pages, 27 system calls, and on ext4 each of them pays for a journal
 * handle and an inode time update (8-9 us each on the 2-core machine:
 * more than SQLite's own work for the commit).  Here the writes to a WAL
 * file that continue one another are gathered in memory and written with
 * one call when the commit frame is complete (its header carries the
 * database size, non-zero only in a commit frame), before SQLite goes on
 * to publish the commit in the WAL index.  So another connection never
 * sees a commit whose frames are not in the file, and a crash loses only
 * frames of a transaction that had not committed, as without the buffer.
 *
 * Invariants, for a WAL file:
 *   - the buffer holds one contiguous range [off, off + len) not yet
 *     written; any write that does not continue it, and every other
 *     operation on the file (read, sync, truncate, size, lock, control,
 *     close), writes it out first, so the file is always what SQLite
 *     wrote, in SQLite's order, when anything can look at it;
 *   - a failed write-out drops the buffer and fails the operation that
 *     caused it: those frames belong to the open write transaction, which
 *     an I/O error ends (SQLite rolls it back);
 *   - only appends are gathered: a write below the end of what this
 *     handle wrote (`hi`) writes the buffer out and goes to the file
 *     itself.  A large transaction spills pages to the log before its
 *     commit; a page it changes again is written over in place, and
 *     after the commit frame SQLite rewrites the checksums of the frames
 *     from there (walRewriteChecksums: a read, then a 24-byte header,
 *     a frame), the commit frame's last.  Gathered, that header stayed
 *     in the buffer after COMMIT returned, until the next write to the
 *     log: a crash meanwhile lost the committed transaction, and a
 *     checkpoint that had copied its pages left a database recovery
 *     could not match.  The log's own header (offset 0: a log started
 *     over) begins a new range;
 *   - what is still gathered when the write transaction ends (the
 *     database's WAL write lock given up) was written early by a
 *     transaction that then rolled back: it is dropped, never written,
 *     since the next writer (another process sharing the cache too)
 *     puts its own frames at those offsets;
 *   - past WB_MAX bytes (a large transaction) the buffer is written out;
 *     it goes out in pieces of WB_CHUNK (the default VFS takes less than
 *     128 KiB a write): a commit of a 100 KiB file is two calls, not 60.
 * Every other file (the database, its -shm, journals, temporary files) is
 * the default VFS's, untouched.  A file's buffer is used by the one
 * connection that owns the file (the cache lock serialises it).  The VFS
 * is registered once per process (not as the default) and named at
 * sqlite3_open_v2 by cache/db.c. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"

#define WB_MAX (4u << 20)
/* The default VFS writes at most 128 KiB - 1 bytes a call (unixWrite):
 * a buffer goes out in pieces of this size. */
#define WB_CHUNK ((size_t)64 * 1024)
#define WAL_HDR 32       /* the WAL file's own header */
#define FRAME_HDR 24     /* a frame's header */

struct wb_file {
    sqlite3_file base;   /* pMethods: &wb_methods */
    sqlite3_file *real;  /* the default VFS's file, allocated right after */
    bool wal;
    bool commit_hdr;     /* the buffer ends with a commit frame's header */
    unsigned char *buf;
    size_t len, cap;
    sqlite3_int64 off;   /* file offset of buf[0] */
    sqlite3_int64 hi;    /* the end of the highest write so far */
    struct wb_file *log; /* a database: its WAL file, while open */
    struct wb_file *db;  /* a WAL file: its database's file */
};

static sqlite3_vfs *base_vfs;
static sqlite3_vfs wb_vfs;
static uint64_t wb_writes, wb_flushes; /* atomics: for tests and status */

static struct wb_file *F(sqlite3_file *p)
{
    return (struct wb_file *)p;
}

/* The system's errno of the calling thread's first failed write, sync,
 * truncate or shared-memory call since the last take (db_io_errno_take,
 * db_internal.h):
 * the failure SQLite reports, not what its recovery met after it.
 * sqlite3_system_errno was 0 after a COMMIT whose log write failed
 * (SQLite 3.40.1; a test VFS failing the writes with EDQUOT saw its
 * xGetLastError never called), so a quota's EDQUOT read as EIO and was
 * not seen as want of room.  Taken right after the default VFS returns,
 * before anything can change it (the unix VFS logs through sqlite3_log,
 * which the cache does not configure). */
__thread int db_io_errno;

static int caught(int rc)
{
    if ((rc & 0xff) == SQLITE_IOERR && !db_io_errno)
        db_io_errno = errno;
    return rc;
}

static int flush(struct wb_file *f)
{
    int rc = SQLITE_OK;
    for (size_t done = 0; rc == SQLITE_OK && done < f->len; done += WB_CHUNK) {
        size_t n = f->len - done < WB_CHUNK ? f->len - done : WB_CHUNK;
        rc = caught(f->real->pMethods->xWrite(f->real, f->buf + done, (int)n,
                                              f->off + (sqlite3_int64)done));
        __atomic_add_fetch(&wb_flushes, 1, __ATOMIC_RELAXED);
    }
    f->len = 0;
    f->commit_hdr = false;
    return rc;
}

/* Writes what is gathered, then this write, to the file itself; a
 * commit's header so written still makes its page go out at once. */
static int write_through(struct wb_file *f, const void *data, int amt, sqlite3_int64 ofst,
                         bool commit_hdr)
{
    int rc = flush(f);
    if (rc == SQLITE_OK)
        rc = caught(f->real->pMethods->xWrite(f->real, data, amt, ofst));
    f->commit_hdr = rc == SQLITE_OK && commit_hdr;
    return rc;
}

static int wb_write(sqlite3_file *p, const void *data, int amt, sqlite3_int64 ofst)
{
    struct wb_file *f = F(p);
    if (!f->wal)
        return caught(f->real->pMethods->xWrite(f->real, data, amt, ofst));
    __atomic_add_fetch(&wb_writes, 1, __ATOMIC_RELAXED);
    int rc;
    const unsigned char *d = data;
    /* A frame header whose "database size" field is non-zero opens the
     * commit frame; the write after it (the page) completes the commit. */
    bool commit_hdr = amt == FRAME_HDR && ofst >= WAL_HDR && (d[4] | d[5] | d[6] | d[7]) != 0;
    if (ofst == 0)
        f->hi = 0; /* the log starts over */
    if (f->len && ofst != f->off + (sqlite3_int64)f->len && (rc = flush(f)) != SQLITE_OK)
        return rc;
    /* Over frames already written (a page changed again, a checksum
     * rewritten): never left waiting in the buffer. */
    if (ofst < f->hi)
        return write_through(f, data, amt, ofst, commit_hdr);
    f->hi = ofst + amt;
    if (f->len + (size_t)amt > f->cap) {
        size_t cap = f->cap ? f->cap : 64 * 1024;
        while (cap < f->len + (size_t)amt)
            cap *= 2;
        unsigned char *nb = realloc(f->buf, cap);
        if (!nb) /* no room to gather */
            return write_through(f, data, amt, ofst, commit_hdr);
        f->buf = nb;
        f->cap = cap;
    }
    if (!f->len)
        f->off = ofst;
    bool ends_commit = f->commit_hdr;
    memcpy(f->buf + f->len, data, (size_t)amt);
    f->len += (size_t)amt;
    f->commit_hdr = commit_hdr;
    if (ends_commit || f->len >= WB_MAX)
        return flush(f);
    return SQLITE_OK;
}

/* Every other method of a WAL file writes the buffer out first. */
#define FLUSHED(f)                                                                                \
    do {                                                                                          \
        if ((f)->wal) {                                                                           \
            int frc_ = flush(f);                                                                  \
            if (frc_ != SQLITE_OK)                                                                \
                return frc_;                                                                      \
        }                                                                                         \
    } while (0)

static int wb_close(sqlite3_file *p)
{
    struct wb_file *f = F(p);
    int rc = f->wal ? flush(f) : SQLITE_OK;
    if (f->db && f->db->log == f)
        f->db->log = NULL;
    if (f->log)
        f->log->db = NULL;
    int crc = f->real->pMethods->xClose(f->real);
    free(f->buf);
    f->buf = NULL;
    f->cap = 0;
    return rc != SQLITE_OK ? rc : crc;
}

static int wb_read(sqlite3_file *p, void *data, int amt, sqlite3_int64 ofst)
{
    struct wb_file *f = F(p);
    FLUSHED(f);
    return f->real->pMethods->xRead(f->real, data, amt, ofst);
}

static int wb_truncate(sqlite3_file *p, sqlite3_int64 size)
{
    struct wb_file *f = F(p);
    FLUSHED(f);
    if (f->hi > size)
        f->hi = size;
    return caught(f->real->pMethods->xTruncate(f->real, size));
}

static int wb_sync(sqlite3_file *p, int flags)
{
    struct wb_file *f = F(p);
    FLUSHED(f);
    return caught(f->real->pMethods->xSync(f->real, flags));
}

static int wb_file_size(sqlite3_file *p, sqlite3_int64 *size)
{
    struct wb_file *f = F(p);
    FLUSHED(f);
    return f->real->pMethods->xFileSize(f->real, size);
}

static int wb_lock(sqlite3_file *p, int level)
{
    struct wb_file *f = F(p);
    FLUSHED(f);
    return f->real->pMethods->xLock(f->real, level);
}

static int wb_unlock(sqlite3_file *p, int level)
{
    struct wb_file *f = F(p);
    FLUSHED(f);
    return f->real->pMethods->xUnlock(f->real, level);
}

static int wb_check_reserved(sqlite3_file *p, int *out)
{
    return F(p)->real->pMethods->xCheckReservedLock(F(p)->real, out);
}

static int wb_file_control(sqlite3_file *p, int op, void *arg)
{
    struct wb_file *f = F(p);
    FLUSHED(f);
    return f->real->pMethods->xFileControl(f->real, op, arg);
}

static int wb_sector_size(sqlite3_file *p)
{
    return F(p)->real->pMethods->xSectorSize(F(p)->real);
}

static int wb_device_characteristics(sqlite3_file *p)
{
    return F(p)->real->pMethods->xDeviceCharacteristics(F(p)->real);
}

static int wb_shm_map(sqlite3_file *p, int pg, int pgsz, int extend, void volatile **out)
{
    sqlite3_file *r = F(p)->real;
    return r->pMethods->iVersion >= 2 ? caught(r->pMethods->xShmMap(r, pg, pgsz, extend, out))
                                      : SQLITE_IOERR_SHMMAP;
}

/* The database's WAL write lock (SQLite's WAL_WRITE_LOCK, the first of
 * its shared-memory locks), given up: a write transaction has ended.  A
 * commit's frames went out with its commit frame, so whatever is still
 * gathered belongs to a transaction that was rolled back after writing
 * frames early (one larger than the page cache).  It is dropped: those
 * offsets are free for the next writer, another process's as well, and
 * written out later they would land over its committed frames. */
static void drop_uncommitted(struct wb_file *db, int offset, int n, int flags)
{
    struct wb_file *log = db->log;
    if (!log || !log->len || !(flags & SQLITE_SHM_UNLOCK) || !(flags & SQLITE_SHM_EXCLUSIVE) ||
        offset > 0 || offset + n <= 0)
        return;
    /* hi stays: the next writes below it go to the file at once, which is
     * always right (the buffer may have begun inside a frame). */
    log->len = 0;
    log->commit_hdr = false;
}

static int wb_shm_lock(sqlite3_file *p, int offset, int n, int flags)
{
    drop_uncommitted(F(p), offset, n, flags);
    sqlite3_file *r = F(p)->real;
    return r->pMethods->iVersion >= 2 ? r->pMethods->xShmLock(r, offset, n, flags)
                                      : SQLITE_IOERR_SHMLOCK;
}

static void wb_shm_barrier(sqlite3_file *p)
{
    sqlite3_file *r = F(p)->real;
    if (r->pMethods->iVersion >= 2)
        r->pMethods->xShmBarrier(r);
}

static int wb_shm_unmap(sqlite3_file *p, int del)
{
    sqlite3_file *r = F(p)->real;
    return r->pMethods->iVersion >= 2 ? r->pMethods->xShmUnmap(r, del) : SQLITE_OK;
}

static int wb_fetch(sqlite3_file *p, sqlite3_int64 ofst, int amt, void **out)
{
    struct wb_file *f = F(p);
    FLUSHED(f);
    if (f->real->pMethods->iVersion < 3) {
        *out = NULL;
        return SQLITE_OK;
    }
    return f->real->pMethods->xFetch(f->real, ofst, amt, out);
}

static int wb_unfetch(sqlite3_file *p, sqlite3_int64 ofst, void *page)
{
    sqlite3_file *r = F(p)->real;
    return r->pMethods->iVersion >= 3 ? r->pMethods->xUnfetch(r, ofst, page) : SQLITE_OK;
}

static const sqlite3_io_methods wb_methods = {
    3,
    wb_close,
    wb_read,
    wb_write,
    wb_truncate,
    wb_sync,
    wb_file_size,
    wb_lock,
    wb_unlock,
    wb_check_reserved,
    wb_file_control,
    wb_sector_size,
    wb_device_characteristics,
    wb_shm_map,
    wb_shm_lock,
    wb_shm_barrier,
    wb_shm_unmap,
    wb_fetch,
    wb_unfetch,
};

static int wb_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                   int *out_flags)
{
    (void)vfs;
    struct wb_file *f = F(file);
    memset(f, 0, sizeof(*f));
    f->real = (sqlite3_file *)(f + 1);
    int rc = base_vfs->xOpen(base_vfs, name, f->real, flags, out_flags);
    if (rc != SQLITE_OK) {
        if (f->real->pMethods)
            f->real->pMethods->xClose(f->real);
        f->base.pMethods = NULL;
        return rc;
    }
    f->wal = (flags & SQLITE_OPEN_WAL) != 0;
    f->base.pMethods = &wb_methods;
    if (f->wal) {
        /* Its database, opened through this VFS too: told of its log. */
        sqlite3_file *db = sqlite3_database_file_object(name);
        if (db && db->pMethods == &wb_methods) {
            f->db = F(db);
            F(db)->log = f;
        }
    }
    return SQLITE_OK;
}

/* The rest of the VFS is the default one's. */
static int wb_delete(sqlite3_vfs *v, const char *n, int sync)
{
    (void)v;
    return base_vfs->xDelete(base_vfs, n, sync);
}
static int wb_access(sqlite3_vfs *v, const char *n, int flags, int *out)
{
    (void)v;
    return base_vfs->xAccess(base_vfs, n, flags, out);
}
static int wb_full_pathname(sqlite3_vfs *v, const char *n, int size, char *out)
{
    (void)v;
    return base_vfs->xFullPathname(base_vfs, n, size, out);
}
static void *wb_dlopen(sqlite3_vfs *v, const char *n)
{
    (void)v;
    return base_vfs->xDlOpen(base_vfs, n);
}
static void wb_dlerror(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    base_vfs->xDlError(base_vfs, n, out);
}
static void (*wb_dlsym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
    (void)v;
    return base_vfs->xDlSym(base_vfs, h, sym);
}
static void wb_dlclose(sqlite3_vfs *v, void *h)
{
    (void)v;
    base_vfs->xDlClose(base_vfs, h);
}
static int wb_randomness(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return base_vfs->xRandomness(base_vfs, n, out);
}
static int wb_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return base_vfs->xSleep(base_vfs, us);
}
static int wb_current_time(sqlite3_vfs *v, double *out)
{
    (void)v;
    return base_vfs->xCurrentTime(base_vfs, out);
}
static int wb_last_error(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return base_vfs->xGetLastError ? base_vfs->xGetLastError(base_vfs, n, out) : 0;
}
static int wb_current_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    (void)v;
    if (base_vfs->iVersion >= 2 && base_vfs->xCurrentTimeInt64)
        return base_vfs->xCurrentTimeInt64(base_vfs, out);
    double d = 0;
    int rc = base_vfs->xCurrentTime(base_vfs, &d);
    *out = (sqlite3_int64)(d * 86400000.0);
    return rc;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int register_rc = SQLITE_ERROR;

static void register_vfs(void)
{
    base_vfs = sqlite3_vfs_find(NULL);
    if (!base_vfs)
        return;
    wb_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(struct wb_file) + base_vfs->szOsFile,
        .mxPathname = base_vfs->mxPathname,
        .zName = DB_VFS_NAME,
        .xOpen = wb_open,
        .xDelete = wb_delete,
        .xAccess = wb_access,
        .xFullPathname = wb_full_pathname,
        .xDlOpen = wb_dlopen,
        .xDlError = wb_dlerror,
        .xDlSym = wb_dlsym,
        .xDlClose = wb_dlclose,
        .xRandomness = wb_randomness,
        .xSleep = wb_sleep,
        .xCurrentTime = wb_current_time,
        .xGetLastError = wb_last_error,
        .xCurrentTimeInt64 = wb_current_time64,
    };
    register_rc = sqlite3_vfs_register(&wb_vfs, 0);
}

const char *db_vfs(void)
{
    pthread_once(&once, register_vfs);
    return register_rc == SQLITE_OK ? DB_VFS_NAME : NULL;
}

void cache_wal_io(uint64_t *writes, uint64_t *flushes)
{
    *writes = __atomic_load_n(&wb_writes, __ATOMIC_RELAXED);
    *flushes = __atomic_load_n(&wb_flushes, __ATOMIC_RELAXED);
}
