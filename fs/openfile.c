/* openfile.c - the open-file table: one struct ofile per open inode,
 * shared by all its handles, so a reader sees what a writer wrote before
 * it is even flushed, and the inode's size is the buffer's.
 *
 * Lifecycle: ofile_get at open/create (and briefly for a truncate by path),
 * ofile_put at release.  The buffer is loaded once (ops_load reads the node
 * and its bytes from the cache and installs them, all under the entry's
 * lock, so it never installs bytes older than a flush), changed by
 * write/truncate (dirty), and written to the cache by ofile_flush at flush,
 * fsync and release, so data is durable when close(2) or fsync(2) returns.
 * Only content a writer finished is pushed by a periodic sync: saved by
 * fsync or by the release of the last writable handle (a flush, the close
 * of one descriptor, may leave others of the same writer open: its content
 * is held, pushed only by the final sync).  At the unmount of its store, an
 * edit no flush saved is kept as a record (ofile_keep_unsaved_all,
 * openfile_all.c), not as the file's content, and the buffer stays (what
 * its writer closes later is saved whole).  A clean buffer whose cache
 * content changed (a remote update) is dropped when the sync tells the
 * kernel (ofile_forget_clean), before the kernel drops its pages, and the
 * next read, open or getattr takes the cache's version.  A buffer whose
 * edit lost to the store while writers still hold it (lost: an fsync that
 * met the store's version, or a sync that kept their saved content as a
 * record, ofile_lost) stays theirs: each later save keeps it as a record,
 * and it is dropped when the last writer goes or a new writer takes the
 * file over (ofile_take_over, which gives up a cut edit too).
 *
 * Edits: an edit given up while writers of it still hold the file (a cut
 * edit's close put the file back; a new writer took over a lost or a cut
 * edit) moves f->edit on, and the handles of the old one (ops.h, struct
 * ops_writer) are refused every later write, truncate and fsync, and save
 * nothing at their close: what they wrote would land on the version the
 * file went back to and be pushed as a mix.  They count as writers no more
 * (f->ended): a later writer's close is the last one, and its edit is
 * pushed, whether or not they are still open.
 *
 * Locking: the table lock guards the hash chains and refs; each entry's
 * own lock guards its buffer.  Order: an entry's lock, then the cache's
 * lock (ofile_flush, ops_load, ops_getnode); the table lock is a leaf,
 * taken alone (it may be taken with the cache lock held: ofile_is_open
 * from a readdir callback), never while waiting for another lock.  Neither lock is ever held
 * while replying to the kernel: reads copy out first.  Inode numbers are
 * cache rows, unique across the stores of one daemon, so one table serves
 * every mount. */
#include "openfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "log.h"
#include "rules.h"

#define NBUCKETS 256

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ofile *table[NBUCKETS]; /* guarded by table_lock */

static struct ofile **bucket(uint64_t row)
{
    return &table[(row * 0x9E3779B97F4A7C15ull) >> 56];
}

struct ofile *ofile_get(uint64_t row)
{
    pthread_mutex_lock(&table_lock);
    struct ofile **b = bucket(row), *f;
    for (f = *b; f; f = f->next)
        if (f->row == row)
            break;
    if (!f) {
        f = calloc(1, sizeof(*f));
        if (f) {
            f->row = row;
            pthread_mutex_init(&f->lock, NULL);
            f->next = *b;
            *b = f;
        }
    }
    if (f)
        f->refs++;
    pthread_mutex_unlock(&table_lock);
    return f;
}

void ofile_hold(struct ofile *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&table_lock);
    f->refs++;
    pthread_mutex_unlock(&table_lock);
}

void ofile_put(struct ofile *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&table_lock);
    if (--f->refs > 0) {
        pthread_mutex_unlock(&table_lock);
        return;
    }
    for (struct ofile **p = bucket(f->row); *p; p = &(*p)->next) {
        if (*p == f) {
            *p = f->next;
            break;
        }
    }
    pthread_mutex_unlock(&table_lock);
    pthread_mutex_destroy(&f->lock);
    free(f->buf);
    free(f->prior);
    free(f);
}

void ofile_lock(struct ofile *f)
{
    pthread_mutex_lock(&f->lock);
}

void ofile_unlock(struct ofile *f)
{
    pthread_mutex_unlock(&f->lock);
}

bool ofile_current_locked(const struct ofile *f, const char *sha)
{
    return f->loaded && (f->dirty || f->lost || strcmp(f->sha, sha) == 0);
}

void ofile_install_locked(struct ofile *f, char *buf, size_t len, const char *sha)
{
    if (ofile_current_locked(f, sha)) {
        free(buf);
        return;
    }
    free(f->buf);
    f->buf = buf;
    f->len = f->cap = len;
    f->loaded = true;
    f->wrote = false;
    snprintf(f->sha, sizeof(f->sha), "%s", sha);
}

/* Makes room for n bytes (n within the content limit). */
static int reserve(struct ofile *f, size_t n)
{
    if (n <= f->cap)
        return 0;
    size_t cap = f->cap ? f->cap : 4096;
    while (cap < n)
        cap *= 2;
    if (cap > MEM_CONTENT_MAX_BYTES)
        cap = MEM_CONTENT_MAX_BYTES;
    char *b = realloc(f->buf, cap);
    if (!b)
        return -ENOMEM;
    f->buf = b;
    f->cap = cap;
    return 0;
}

/* The first change to a clean buffer marks its node dirty in the cache
 * (c), before the buffer changes and under its lock: a mark that fails
 * fails the change, which then leaves the buffer as it was (changed
 * first, the bytes the caller was told failed would be saved by the next
 * close, and the node, never marked, left open to a remote update).  A
 * file this open created is dirty in the cache already. */
static int mark_first(struct ofile *f, struct cache *c)
{
    if (!c || f->dirty || f->unsaved || f->lost)
        return 0;
    return cache_mark_dirty(c, f->row);
}

/* A handle of an edit given up since it opened (openfile.h, "Edits"):
 * the error of the give-up that ended its edit. */
static int ended_locked(const struct ofile *f, unsigned edit)
{
    return edit != OFILE_ANY && edit != f->edit ? f->ended_err[edit % OFILE_ENDED_ERRS] : 0;
}

/* The edit in progress is given up while writers of it may remain: their
 * handles get err from now on, whatever later give-ups tell the handles
 * of later edits (one that outlived OFILE_ENDED_ERRS more gets a later
 * one's error, an error still). */
static void end_edit_locked(struct ofile *f, int err)
{
    if (!f->writers)
        return; /* no handle of it is left to tell */
    f->ended += f->joined;
    f->joined = 0;
    f->ended_err[f->edit % OFILE_ENDED_ERRS] = err;
    f->edit++;
    if (f->edit == OFILE_ANY)
        f->edit = 0;
}

unsigned ofile_join(struct ofile *f)
{
    pthread_mutex_lock(&f->lock);
    f->joined++;
    unsigned edit = f->edit;
    pthread_mutex_unlock(&f->lock);
    return edit;
}

unsigned ofile_live_writers_locked(const struct ofile *f)
{
    return f->writers - f->ended;
}

static void set_dirty(struct ofile *f, int64_t now_ns)
{
    f->dirty = true;
    f->wrote = true;
    f->mtime_ns = now_ns;
    f->ctime_ns = now_ns;
}

static int write_locked(struct ofile *f, unsigned edit, const char *data, size_t size,
                        uint64_t off, int64_t now_ns, struct cache *c)
{
    int rc = ended_locked(f, edit);
    if (rc)
        return rc;
    if (off > MEM_CONTENT_MAX_BYTES || size > MEM_CONTENT_MAX_BYTES - off) {
        /* `cat big > f`: the file was emptied, or written up to the limit. */
        f->cut = f->cut || f->dirty || f->unsaved || f->held;
        return -EFBIG;
    }
    size_t end = (size_t)off + size;
    rc = f->loaded ? reserve(f, end > f->len ? end : f->len) : -EIO;
    if (!rc)
        rc = mark_first(f, c);
    if (!rc) {
        if (off > f->len)
            memset(f->buf + f->len, 0, (size_t)off - f->len);
        if (size)
            memcpy(f->buf + off, data, size);
        if (end > f->len)
            f->len = end;
        set_dirty(f, now_ns);
    }
    return rc;
}

int ofile_write(struct ofile *f, unsigned edit, const char *data, size_t size, uint64_t off,
                int64_t now_ns, struct cache *c)
{
    pthread_mutex_lock(&f->lock);
    int rc = write_locked(f, edit, data, size, off, now_ns, c);
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int ofile_append(struct ofile *f, unsigned edit, const char *data, size_t size, uint64_t off,
                 int64_t now_ns, struct cache *c, bool *moved)
{
    *moved = false;
    pthread_mutex_lock(&f->lock);
    /* Not loaded: -EIO below, and the caller loads the buffer first. */
    uint64_t end = f->loaded ? f->len : off;
    int rc = write_locked(f, edit, data, size, end, now_ns, c);
    *moved = !rc && end != off;
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int ofile_truncate(struct ofile *f, unsigned edit, uint64_t size, int64_t now_ns,
                   struct cache *c)
{
    if (size > MEM_CONTENT_MAX_BYTES)
        return -EFBIG;
    pthread_mutex_lock(&f->lock);
    int rc = ended_locked(f, edit);
    if (!rc && !f->loaded && size != 0)
        rc = -EIO;
    if (!rc)
        rc = reserve(f, (size_t)size);
    if (!rc)
        rc = mark_first(f, c);
    if (!rc && !f->loaded) {
        f->loaded = true;
        f->len = 0;
        f->sha[0] = '\0'; /* edited from content unknown here: see ofile_set_origin */
    }
    if (!rc) {
        if (size > f->len)
            memset(f->buf + f->len, 0, (size_t)size - f->len);
        f->len = (size_t)size;
        if (!size)
            f->cut = false; /* written again from nothing */
        set_dirty(f, now_ns);
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int ofile_read(struct ofile *f, uint64_t off, size_t size, char **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&f->lock);
    int rc = 0;
    if (!f->loaded) {
        rc = -EIO;
    } else if (off < f->len) {
        size_t k = f->len - (size_t)off;
        if (k > size)
            k = size;
        *out = malloc(k ? k : 1);
        if (*out) {
            memcpy(*out, f->buf + off, k);
            *n = k;
        } else {
            rc = -ENOMEM;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

void ofile_writer_open(struct ofile *f)
{
    pthread_mutex_lock(&f->lock);
    f->writers++;
    pthread_mutex_unlock(&f->lock);
}

bool ofile_writer_release(struct ofile *f, unsigned edit)
{
    pthread_mutex_lock(&f->lock);
    bool live = true;
    if (edit == f->edit && f->joined) {
        f->joined--;
    } else if (edit != OFILE_ANY && f->ended) {
        f->ended--;
        live = false;
    }
    if (f->writers)
        f->writers--;
    bool last = f->writers == 0 || (live && ofile_live_writers_locked(f) == 0);
    pthread_mutex_unlock(&f->lock);
    return last;
}

static void forget_prior_locked(struct ofile *f)
{
    free(f->prior);
    f->prior = NULL;
    f->prior_len = 0;
    f->has_prior = false;
}

/* Puts back what the file held before the edit a refused write cut short,
 * when part of it is in the cache already (held: the shell's `>` closes a
 * copy of the emptied file at once; or a file this open created): the
 * local edit saved before it when the store lacks that edit (f->prior,
 * keep_prior_locked), else the store's version (the caller fetched it:
 * ops_save), or empty for a file never synced, saved as finished.  When the store's version is not
 * in the cache (its download failed), the part saved stays, refused: it is
 * never pushed until the file is written again. */
static int revert_cut_locked(struct ofile *f, struct cache *c)
{
    struct cnode n = {0};
    char *base = NULL, sha[SHA256_HEX_LEN + 1];
    size_t len = 0;
    int rc = cache_getattr(c, f->row, &n);
    /* (Moved meanwhile, a sync brought the store's version: it stays.) */
    if (!rc && strcmp(n.sha, f->sha) == 0) {
        int brc = 0;
        const char *to = "";
        if (f->has_prior) { /* a local edit before this one */
            to = f->prior ? f->prior : "";
            len = f->prior_len;
        } else if (n.base_sha[0]) {
            brc = cache_blob_get(c, n.base_sha, &base, &len);
            to = base ? base : "";
        }
        if (!brc)
            rc = cache_set_content_if(c, f->row, to, len, f->mtime_ns,
                                      f->sha[0] ? f->sha : NULL, false, sha);
        else if (brc == -ENOENT)
            rc = cache_mark_refused(c, f->row, f->sha, "cut short by a write past 102,400 bytes");
        else
            rc = brc;
        if (rc == -ESTALE)
            rc = 0;
    }
    free(base);
    if (!rc) /* (a failure is tried again by the next save: the prior with it) */
        forget_prior_locked(f);
    cnode_clear(&n);
    return rc;
}

/* Before a writer's first held save (the shell's `>` saves the emptied
 * file at once) replaces a local edit the store lacks: that edit's bytes,
 * which the save frees in the cache, so that a cut edit can go back to
 * them (revert_cut_locked).  Kept in memory while the save stays held.
 * Taken only after an O_TRUNC open of such an edit (ofile_set_origin's
 * local), so that ordinary closes read nothing more.  Best effort: when
 * they cannot be read, a cut edit goes back to the store's version. */
static void keep_prior_locked(struct ofile *f, struct cache *c)
{
    forget_prior_locked(f);
    struct cnode n = {0};
    if (f->sha[0] && cache_getattr(c, f->row, &n) == 0 && strcmp(n.sha, f->sha) == 0 &&
        strcmp(n.base_sha, f->sha) != 0 &&
        cache_blob_get(c, f->sha, &f->prior, &f->prior_len) == 0)
        f->has_prior = true;
    cnode_clear(&n);
}

/* A write past the size limit was refused after the buffer changed: it
 * holds what came before (a file emptied by O_TRUNC, or written up to the
 * limit), not what its writer meant to save, and saving it would push a
 * truncated memory.  It is kept as a record, not saved, and the save fails
 * with EFBIG; the file keeps the content it had before the edit
 * (revert_cut_locked when part of the edit was saved).  A failure leaves
 * all as it was but what is done (cut_kept), for the next save to finish.
 * The caller holds f->lock. */
static int keep_cut_locked(struct ofile *f, struct cache *c)
{
    int rc = 0;
    if (!f->cut_kept && f->loaded && f->len)
        rc = cache_keep_unsaved(c, f->row, f->buf, f->len, CACHE_CONFLICT_CUT);
    if (rc)
        return rc;
    f->cut_kept = true;
    if (f->unsaved || f->held)
        rc = revert_cut_locked(f, c);
    if (rc)
        return rc;
    log_warn("a write past the size limit was refused; the cut edit is not saved but kept as a "
             "conflict record (memstorefs conflicts), and the file goes back to what it held "
             "before it", "limit_bytes", "102400");
    f->dirty = false;
    f->kept = false;
    f->unsaved = false;
    f->held = false;
    f->cut = false;
    f->cut_kept = false;
    f->loaded = false; /* the next open or read loads the saved content */
    return -EFBIG;
}

bool ofile_is_cut(struct ofile *f)
{
    pthread_mutex_lock(&f->lock);
    bool cut = f->cut;
    pthread_mutex_unlock(&f->lock);
    return cut;
}

#define MSG_LOST_WRITES                                                                            \
    "a writer went on editing a file after its edit lost to the store; what it saves is kept as " \
    "a conflict record (memstorefs conflicts), not as the file's content"

/* The buffer goes: the next open or read loads the cache's content. */
static void drop_locked(struct ofile *f)
{
    forget_prior_locked(f);
    f->origin_local = false;
    free(f->buf);
    f->buf = NULL;
    f->len = f->cap = 0;
    f->sha[0] = '\0';
    f->mtime_ns = f->ctime_ns = 0;
    f->loaded = false;
    f->wrote = false;
    f->new_row = false;
}

/* A save of a lost edit (f->lost): the writers' version is not the store's
 * version's continuation, so it is kept as a record, never saved as the
 * file's content.  end (the last writer has gone, or a new one takes the
 * file over): the buffer is dropped, and the file reads as the store has
 * it. */
static int keep_lost_locked(struct ofile *f, struct cache *c, bool end)
{
    int rc = 0;
    if (f->dirty) {
        rc = cache_keep_unsaved(c, f->row, f->buf ? f->buf : "", f->len,
                                CACHE_CONFLICT_STORE_WON);
        if (!rc) {
            char bytes[24];
            snprintf(bytes, sizeof(bytes), "%zu", f->len);
            log_warn(MSG_LOST_WRITES, "bytes", bytes);
            f->dirty = false;
        }
    }
    if (!rc && end) {
        f->lost = f->cut = f->cut_kept = f->kept = f->unsaved = f->held = false;
        drop_locked(f);
        end_edit_locked(f, -EIO);
    }
    return rc;
}

int ofile_flush(struct ofile *f, unsigned edit, struct cache *c, enum ofile_flush_why why,
                const struct cache_then *then, bool *dropped)
{
    bool gone = false;
    pthread_mutex_lock(&f->lock);
    int rc = 0, ended = ended_locked(f, edit);
    /* OFILE_LAST with writers: one opened since the release counted the
     * last one out, and may have written into the shared buffer already;
     * saved held, as its unfinished work (pushed once it is done). */
    unsigned live = ofile_live_writers_locked(f);
    bool held = why == OFILE_CLOSE || ((why == OFILE_PATH || why == OFILE_LAST) && live);
    if (ended) {
        /* A handle of an ended edit has nothing of its own in the buffer
         * (its writes are refused): its close saves nothing, and its
         * fsync must not make another writer's unfinished work final. */
        rc = why == OFILE_SYNC ? ended : 0;
    } else if (why == OFILE_READER && live) {
        /* A reader's close: the buffer is the unfinished work of the
         * writers still open (saving it, even held, would have the final
         * sync or a restart after a crash push what no writer closed). */
    } else if (f->lost) {
        rc = keep_lost_locked(f, c, !live);
        gone = !rc && !f->loaded;
    } else if (f->cut && why != OFILE_PATH && (f->dirty || f->unsaved || f->held)) {
        /* (A truncate by path is another process's: ops_take_over gave
         * the cut edit up before it.) */
        rc = keep_cut_locked(f, c);
        gone = rc == -EFBIG;
        /* A writer's close or fsync gave the edit up: the handles of it
         * still open are done with.  (At the last live writer's release
         * none of it is left: one opened since the release counted the
         * last out belongs to an edit of its own.) */
        if (gone && (why == OFILE_CLOSE || why == OFILE_SYNC))
            end_edit_locked(f, -EFBIG);
    } else if (f->dirty || f->unsaved) {
        char sha[SHA256_HEX_LEN + 1];
        /* The bytes were edited from f->sha: if the cache moved meanwhile
         * (a sync pulled the store's version), the store wins and they are
         * kept as a conflict record. */
        const char *from = f->loaded && f->sha[0] ? f->sha : NULL;
        if (held && !f->held && from && f->origin_local)
            keep_prior_locked(f, c);
        f->origin_local = false; /* (only the edit's first save replaces it) */
        rc = held ? cache_save_closed_then(c, f->row, f->buf ? f->buf : "", f->len,
                                           f->mtime_ns, from, then, sha)
                  : cache_set_content_if(c, f->row, f->buf ? f->buf : "", f->len, f->mtime_ns,
                                         from, false, sha);
        if (!rc) {
            f->dirty = false;
            f->kept = false;
            f->unsaved = false;
            f->new_row = false;
            f->held = held;
            if (!held)
                forget_prior_locked(f);
            memcpy(f->sha, sha, sizeof(sha));
        } else if (rc == -ESTALE) {
            log_warn("memory changed both locally and remotely; keeping the remote version",
                     "detail", "the edit of a file still open lost to the store; it is kept as "
                     "a conflict record (memstorefs conflicts)");
            f->dirty = false;
            f->kept = false;
            f->unsaved = false;
            f->held = false;
            forget_prior_locked(f);
            /* Writers still holding the file go on with their version
             * (kept whole at each save); with none, the next open or read
             * loads the store's. */
            if (live) {
                f->lost = true;
            } else {
                f->loaded = false;
                gone = true;
            }
            rc = 0;
        }
    } else if (!held && f->held) {
        /* The writer finished: what it saved is pushed from now on.  An
         * fsync commits it too, as one of a dirty buffer does (a close's
         * save waits in the lazy transaction, its journal record the only
         * copy until then). */
        rc = cache_mark_saved(c, f->row);
        if (!rc) {
            f->held = false;
            forget_prior_locked(f);
        }
        if (!rc && why == OFILE_SYNC)
            rc = cache_settle(c);
    }
    pthread_mutex_unlock(&f->lock);
    if (dropped)
        *dropped = gone;
    return rc;
}

/* The contract: openfile.h. */
struct ofile **ofile_take_all(size_t *n)
{
    struct ofile **v = NULL;
    size_t cap = 0;
    *n = 0;
    pthread_mutex_lock(&table_lock);
    for (size_t b = 0; b < NBUCKETS; b++)
        for (struct ofile *f = table[b]; f; f = f->next) {
            if (*n == cap) {
                cap = cap ? cap * 2 : 16;
                struct ofile **nv = realloc(v, cap * sizeof(*nv));
                if (!nv)
                    break;
                v = nv;
            }
            if (*n < cap) {
                f->refs++;
                v[(*n)++] = f;
            }
        }
    pthread_mutex_unlock(&table_lock);
    return v;
}

void ofile_set_origin(struct ofile *f, const char *sha, bool local)
{
    pthread_mutex_lock(&f->lock);
    /* Loaded from sha already (kept by another handle): local all the same,
     * or a cut rewrite went back to the store's version and the local edit
     * it replaced was in no record. */
    if (f->loaded && sha && (!f->sha[0] || strcmp(f->sha, sha) == 0)) {
        snprintf(f->sha, sizeof(f->sha), "%s", sha);
        f->origin_local = local;
    }
    pthread_mutex_unlock(&f->lock);
}

void ofile_adopt_new(struct ofile *f)
{
    pthread_mutex_lock(&f->lock);
    if (f->new_row && f->loaded && !f->dirty && !f->lost)
        f->unsaved = true;
    f->new_row = false;
    pthread_mutex_unlock(&f->lock);
}

void ofile_set_mtime(struct ofile *f, int64_t mtime_ns)
{
    pthread_mutex_lock(&f->lock);
    f->mtime_ns = mtime_ns;
    pthread_mutex_unlock(&f->lock);
}

void ofile_forget_clean(uint64_t row)
{
    struct ofile *f = ofile_find(row);
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    if (f->loaded && !f->dirty && !f->unsaved && !f->lost)
        drop_locked(f);
    pthread_mutex_unlock(&f->lock);
    ofile_put(f);
}

void ofile_lost(uint64_t row, const char *sha)
{
    struct ofile *f = ofile_find(row);
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    if (ofile_live_writers_locked(f) && f->loaded && f->wrote &&
        (f->dirty || strcmp(f->sha, sha) == 0)) {
        f->lost = true;
        f->held = false; /* what the cache held for them is the store's now */
        forget_prior_locked(f);
    }
    pthread_mutex_unlock(&f->lock);
    ofile_put(f);
}

int ofile_take_over(struct ofile *f, struct cache *c, bool *dropped)
{
    *dropped = false;
    pthread_mutex_lock(&f->lock);
    int rc = 0;
    if (f->lost) {
        rc = keep_lost_locked(f, c, true);
        *dropped = !rc;
    } else if (f->cut && (f->dirty || f->unsaved || f->held)) {
        /* As its writer's close would: kept as a record, the file put
         * back, the handles of the edit ended.  Joined instead, the new
         * writer's emptying cleared the cut mark (the edit in no record,
         * its writer's next writes saved and pushed), and what it wrote
         * went back with the cut edit at that writer's close. */
        rc = keep_cut_locked(f, c);
        if (rc == -EFBIG) {
            end_edit_locked(f, -EFBIG);
            rc = 0;
            *dropped = true;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

bool ofile_is_open(uint64_t row)
{
    struct ofile *f = ofile_find(row);
    ofile_put(f);
    return f != NULL;
}

bool ofile_has_writers(uint64_t row)
{
    struct ofile *f = ofile_find(row);
    if (!f)
        return false;
    pthread_mutex_lock(&f->lock);
    bool w = ofile_live_writers_locked(f) > 0;
    pthread_mutex_unlock(&f->lock);
    ofile_put(f);
    return w;
}

struct ofile *ofile_find(uint64_t row)
{
    pthread_mutex_lock(&table_lock);
    struct ofile *f;
    for (f = *bucket(row); f; f = f->next)
        if (f->row == row)
            break;
    if (f)
        f->refs++;
    pthread_mutex_unlock(&table_lock);
    return f;
}

void ofile_attr_locked(const struct ofile *f, uint64_t *size, int64_t *mtime_ns,
                       int64_t *ctime_ns)
{
    if (!f->loaded)
        return;
    *size = f->len;
    if (f->mtime_ns)
        *mtime_ns = f->mtime_ns;
    if (f->ctime_ns > *ctime_ns)
        *ctime_ns = f->ctime_ns; /* a write or truncate not flushed yet */
}
