/* openfile.h - the open-file table: one shared content buffer per open
 * inode (all its handles, readers and writers, share it), refcounted. */
#ifndef MFS_OPENFILE_H
#define MFS_OPENFILE_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

struct cache;
struct cache_then;

/* The ended edits whose errors are kept apart (struct ofile ended_err). */
#define OFILE_ENDED_ERRS 8

struct ofile {
    uint64_t row;              /* cache inode; set at creation, then read-only */
    unsigned refs;             /* guarded by the table lock */
    struct ofile *next;        /* guarded by the table lock */
    pthread_mutex_t lock;      /* guards every field below */
    bool loaded;               /* buf holds the file's content */
    bool dirty;                /* buf differs from what the cache holds */
    bool unsaved;              /* a file this open created: saved by the first
                                * flush even with nothing written (touch) */
    bool new_row;              /* loaded from a file an open made that no
                                * writer saved (CACHE_NEW), its creator's
                                * open gone (a daemon that died, an open
                                * undone): ofile_adopt_new */
    bool held;                 /* the cache has content saved while a writer
                                * still held the file (CACHE_HELD) */
    bool kept;                 /* the unsaved edit was kept as a record at an
                                * unmount; cleared when the buffer is saved */
    bool cut;                  /* a write past the size limit was refused
                                * after the buffer was changed: its edit is
                                * not what the writer meant (ofile_flush) */
    bool cut_kept;             /* that edit's record is written */
    bool lost;                 /* the writers' edit lost to the store while
                                * they held the file open: the buffer is
                                * their version, which every save keeps as
                                * a conflict record (ofile_flush); dropped
                                * when the last writer goes, or a new
                                * writer opens the file (ofile_take_over) */
    bool wrote;                /* a write or truncate went into the buffer
                                * since it was loaded: the open file's own
                                * edit (an idle writer's buffer is not) */
    unsigned writers;          /* open handles that may write */
    unsigned joined;           /* those of them in the edit in progress
                                * (ofile_join) */
    unsigned ended;            /* those in an edit given up since: they
                                * write nothing more, and count as writers
                                * no more (ofile_live_writers_locked) */
    unsigned edit;             /* the edit writers open now join (ofile_join):
                                * moves on when one is given up while
                                * writers of it remain (a cut edit, a lost
                                * or cut edit a new writer took over) */
    int ended_err[OFILE_ENDED_ERRS]; /* what a handle of an earlier edit is
                                * told, by edit number (the give-up's) */
    char *buf;                 /* len bytes, capacity cap */
    size_t len, cap;
    char sha[SHA256_HEX_LEN + 1]; /* cache content buf was loaded from / flushed as */
    char *prior;               /* with has_prior: what the file held before the
                                * writer's first held save, a local edit the
                                * store lacks (the save freed it in the
                                * cache); a cut edit goes back to it */
    size_t prior_len;
    bool has_prior;
    bool origin_local;         /* ofile_set_origin's local: the first held
                                * save keeps the prior (keep_prior_locked) */
    int64_t mtime_ns;          /* modification time of the buffered content */
    int64_t ctime_ns;          /* when a write or truncate last changed it */
};

/* The entry for row, created empty (not loaded) if none; one reference
 * more.  NULL on ENOMEM.  Every get is matched by one ofile_put. */
struct ofile *ofile_get(uint64_t row);
/* Drops a reference; the last one frees the entry (flush it before). */
void ofile_put(struct ofile *f);
/* One more reference to f, which the caller holds already (NULL: none):
 * for work that goes on after an answer that lets another thread put
 * the reference the caller had (fs/ops.c, op_open; ops_write.c). */
void ofile_hold(struct ofile *f);

/* Loading: the caller holds the entry's lock (ofile_lock) from reading
 * the node's hash in the cache to installing its bytes, so a flush (which
 * holds the same lock while committing) can never be overtaken by older
 * bytes.  No download happens under the lock. */
void ofile_lock(struct ofile *f);
void ofile_unlock(struct ofile *f);
/* True when the buffer is loaded and either dirty or loaded from sha. */
bool ofile_current_locked(const struct ofile *f, const char *sha);
/* Installs the cache's content (of hash sha) unless the buffer is current
 * (see above).  Takes ownership of buf (malloc'd) in every case. */
void ofile_install_locked(struct ofile *f, char *buf, size_t len, const char *sha);

/* Edits.  A writable handle belongs to the edit in progress when its open
 * ended (ofile_join).  An edit given up while writers of it still hold
 * the file (a cut edit's close put the file back; a new writer took over
 * an edit that lost to the store or was cut) ends theirs: their later
 * writes, truncates and fsyncs are refused (the cut edit's EFBIG, EIO for
 * a lost one: each handle its own edit's), since what they wrote would
 * land on the version the file went back to, and be saved and pushed as a
 * mix nobody wrote; and they count as writers no more.  Handles opened
 * since write as usual; so does every writer once the last writer of the
 * file is gone.  OFILE_ANY: a change that is no handle's (by path, the
 * kernel's page writeback, the last writer's release). */
#define OFILE_ANY UINT_MAX
/* A writer's handle joins the edit in progress, which is returned. */
unsigned ofile_join(struct ofile *f);

/* Writes size bytes at off (the buffer must be loaded).  -EFBIG past
 * MEM_CONTENT_MAX_BYTES (nothing changes), -ENOMEM.  The first change to
 * a clean buffer marks its node dirty in c first (not for a file this
 * open created: the cache has it dirty already); when that fails, its
 * error is returned and nothing changes.  c NULL: no mark.  A handle of
 * an ended edit (see above) gets that edit's error, nothing written. */
int ofile_write(struct ofile *f, unsigned edit, const char *data, size_t size, uint64_t off,
                int64_t now_ns, struct cache *c);
/* The same for a descriptor opened with O_APPEND: the bytes go at the end
 * of the buffer, wherever the kernel put them (off: its idea of the size,
 * stale when the store changed the file since it last asked); *moved
 * says they went elsewhere than off, so its pages and size are wrong. */
int ofile_append(struct ofile *f, unsigned edit, const char *data, size_t size, uint64_t off,
                 int64_t now_ns, struct cache *c, bool *moved);
/* Sets the length (zero-filling growth); -EFBIG past the limit.  Marks the
 * buffer loaded (a truncation to 0 needs no content); marks as above. */
int ofile_truncate(struct ofile *f, unsigned edit, uint64_t size, int64_t now_ns,
                   struct cache *c);
/* Copies up to size bytes from off into a malloc'd *out (NULL when *n is
 * 0), so the caller replies to the kernel without holding the lock. */
int ofile_read(struct ofile *f, uint64_t off, size_t size, char **out, size_t *n);
/* Why a buffer is written to the cache. */
enum ofile_flush_why {
    OFILE_CLOSE, /* a descriptor closed (FUSE flush): other descriptors of
                  * the writer may still be open, so the content is held */
    OFILE_SYNC,  /* fsync: the writer finished */
    OFILE_PATH,  /* a change made by path (truncate FILE): finished, unless
                  * live writers hold the file open: the buffer is their
                  * unfinished work too, so it is held */
    OFILE_LAST,  /* the last writable handle was released */
    OFILE_READER, /* a read-only handle was released: what writers still open
                   * have written is theirs to save, so only a buffer no
                   * writer holds any more (a failed save of the last one)
                   * is saved, as OFILE_LAST */
};
/* Writes a dirty buffer to the cache (blob, sha, size, mtime, state); the
 * data is durable when this returns 0.  Whether a sync may push it follows
 * why (enum cache_saved).  For OFILE_CLOSE, then (or NULL) is told as soon
 * as the content is durable, before the cache's work ends
 * (cache_save_closed_then): the result is then 0.  -EFBIG: a write past
 * the size limit had cut the edit short; it is kept as a record, not saved.
 * *dropped (may be NULL): the buffer went, a cut edit's or one that lost
 * to the store, whose bytes the kernel's pages hold (they must go:
 * fs_notify_reverted).  edit: the handle's; one of an edit that was given
 * up saves nothing (OFILE_SYNC: its error). */
int ofile_flush(struct ofile *f, unsigned edit, struct cache *c, enum ofile_flush_why why,
                const struct cache_then *then, bool *dropped);
/* Whether a refused write cut the buffer's edit short (its save puts
 * back the store's version: fetch it first, ops_save). */
bool ofile_is_cut(struct ofile *f);
/* A handle that may write opens / is released (edit: the one it joined,
 * OFILE_ANY for a handle that joined none, its open undone before); the
 * release says whether it was the last live one (then ofile_flush(...,
 * OFILE_LAST)): the last of the edit in progress, or the last of all.  A
 * handle whose edit was given up is no writer's any more: one still open
 * holds back no later writer's edit. */
void ofile_writer_open(struct ofile *f);
bool ofile_writer_release(struct ofile *f, unsigned edit);
/* Handles that may write and still can (ended ones left out); the caller
 * holds f->lock. */
unsigned ofile_live_writers_locked(const struct ofile *f);
/* Sets the buffered modification time (touch on an open file). */
void ofile_set_mtime(struct ofile *f, int64_t mtime_ns);
/* A writer opens a file loaded as new_row (see above): its close or fsync
 * saves it, written or not, as the creator's would have (a `touch` of a
 * new file left empty by a daemon killed before its first close; until
 * 6 December 2026 only a write did, and such a file stayed unpushed). */
void ofile_adopt_new(struct ofile *f);

/* The cache's content of row changed under its open file (a remote
 * update): a buffer with no edit of its own is dropped, so the next read,
 * open or getattr takes the cache's version and size instead of bringing
 * the old ones back into the kernel's pages and attributes.  A buffer with
 * edits is kept: its next save finds the change (the store wins). */
void ofile_forget_clean(uint64_t row);

/* The store won over content sha of row, kept as a conflict record (a
 * sync): if writers still hold the file open with that content (saved by
 * an fsync or a close of one descriptor) in its buffer, the buffer is
 * their edit in progress, which lost: it stays theirs (ofile_forget_clean
 * keeps it), and what they write on is kept as a record too, never laid
 * over the store's version and pushed. */
void ofile_lost(uint64_t row, const char *sha);
/* A writer opens the file (or truncates it by path): an edit of the
 * writers before it that is given up is given up now, so the new writer
 * starts from what the file goes back to and its edit is saved as any
 * other: a lost edit is kept as a record (its part not kept yet) and its
 * buffer dropped (the file reads as the store has it); a cut edit (a write
 * past the size limit refused) is kept as a record and the file put back
 * as at its writer's close (the caller fetched the store's version when
 * the cache lacks it: ops_take_over), its handles refused with EFBIG from
 * then on.  *dropped: a buffer went (the kernel's pages of it must not be
 * kept by this open).  0, or the negative errno of a record or revert
 * that failed (the open fails, nothing lost).  The give-up stands when the
 * open fails later (its record is written). */
int ofile_take_over(struct ofile *f, struct cache *c, bool *dropped);

/* True when row has an entry (takes only the table lock, so it may be
 * called with the cache lock held). */
bool ofile_is_open(uint64_t row);
/* True when a live handle that may write holds row open (see above).
 * Takes the entry's lock: never with the cache lock held. */
bool ofile_has_writers(uint64_t row);
/* The entry for row with one reference more, or NULL when the inode is
 * not open (nothing is created). */
struct ofile *ofile_find(uint64_t row);
/* With the lock held: a loaded buffer's size (and its mtime once written)
 * replace *size and *mtime_ns, and the time of its last change *ctime_ns
 * when later; while a file is open its buffer is what reads return, so it
 * is what attributes must report (ftruncate, write: at once). */
void ofile_attr_locked(const struct ofile *f, uint64_t *size, int64_t *mtime_ns,
                       int64_t *ctime_ns);

/* An open with O_TRUNC tells the buffer which cache content (sha) it
 * replaces: one truncated before it was ever loaded learns it, so that its
 * flush can tell whether a sync changed the file meanwhile
 * (cache_set_content_if); local: that content is a local edit the store
 * lacks (its baseline differs), which a cut edit goes back to (the first
 * held save keeps its bytes).  A buffer already loaded from sha (another
 * handle, a reader included, kept it) learns local alone. */
void ofile_set_origin(struct ofile *f, const char *sha, bool local);

/* Every entry of the table, each with one reference more (the caller
 * ofile_puts each); *n of them in a malloc'd array (NULL when none, or
 * fewer than there are when memory runs out).  For the walks of
 * openfile_all.c. */
struct ofile **ofile_take_all(size_t *n);

/* Which open files a final sync is about: true for a row of a store
 * being unmounted (called with the entry's lock held, so it may use the
 * cache).  The other stores' open files are left alone. */
typedef bool (*ofile_mine_fn)(void *arg, uint64_t row);
/* How many of mine's open files hold edits no flush or fsync has saved
 * and no earlier unmount has kept. */
size_t ofile_unsaved_count(ofile_mine_fn mine, void *arg);
/* An open file with an edit no flush saved: its row, and the cache
 * content its buffer was edited from ("" when unknown: a file emptied by
 * O_TRUNC before it was read).  Its save finds the cache moved when that
 * is not the node's content now (a sync brought the store's version):
 * the edit then becomes a conflict record. */
struct ofile_unsaved {
    uint64_t row;
    char from[SHA256_HEX_LEN + 1];
};
/* Of mine's files that writers hold open now, those whose edit no flush
 * or fsync has saved, which their next close or fsync will save (not an
 * edit known to have lost to the store or been cut at the size limit:
 * those become records): at most max of them in *rows (malloc'd, NULL
 * when none); returns how many there are (may be more than max). */
size_t ofile_unsaved_rows(ofile_mine_fn mine, void *arg, struct ofile_unsaved **rows, size_t max);
/* Of mine's files, those open for writing now, through a handle of the
 * edit in progress or an ended one (a shared mapping's pages are written
 * back through any writable handle of the inode): their rows in *rows
 * (malloc'd, NULL when none); returns how many are in it. */
size_t ofile_writing_rows(ofile_mine_fn mine, void *arg, uint64_t **rows);
/* Told of each open file whose unsaved edit could not be kept (its row,
 * the negative errno), with the entry's lock held. */
typedef void (*ofile_lost_fn)(void *arg, uint64_t row, int err);
/* At unmount, for each of mine's open files with unsaved edits: the edit
 * is kept in the cache as a record (cache_keep_unsaved), never as the
 * file's content, since no writer closed or fsynced it; the final sync
 * pushes the file's last saved state.  The buffer stays as it is, so a
 * writer that goes on writing until the mount is gone loses nothing and
 * mixes nothing: what it closes meanwhile is saved whole.  Returns how
 * many were kept; lost is called for each one that could not be (the
 * edit is then in the buffer alone, which the daemon's end throws away). */
size_t ofile_keep_unsaved_all(struct cache *c, ofile_mine_fn mine, ofile_lost_fn lost,
                              void *arg);

#endif
