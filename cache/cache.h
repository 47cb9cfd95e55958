/* cache.h - the local truth of memstorefs: one SQLite database per cache
 * directory holding, for every attached store, its tree of nodes, the
 * content of the files the cache has (keyed by SHA-256), each memory's
 * baseline (remote id and hash at the last sync) and the local state.
 *
 * All functions return 0 or a negative errno (SQLite codes are translated in
 * one table, cache/db.c).  The cache is safe to use from many threads: one
 * connection serialised by a mutex that cache/ owns; no call holds it past
 * its return, so callers may do HTTP or FUSE work between calls. */
#ifndef MFS_CACHE_H
#define MFS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

struct cache;

/* Inode numbers 1 and 2 are never used by rows: a FUSE session maps its
 * root (FUSE_ROOT_ID == 1) to the store's root row, and 2 is the marker. */
#define CACHE_INO_ROOT 1
#define CACHE_INO_MARKER 2

#define CACHE_ID_MAX 128

enum cnode_state { CNODE_CLEAN = 0, CNODE_DIRTY = 1, CNODE_REFUSED = 2 };

/* --sync-deletions, as the cache records it with every deletion. */
enum cache_del_mode { CACHE_DEL_ENABLED = 0, CACHE_DEL_LOG_ONLY = 1, CACHE_DEL_DISABLED = 2 };

/* One node as the cache holds it.  Owned by the caller (fixed buffers but
 * for path, name and base_path, which cnode_clear frees). */
struct cnode {
    uint64_t ino;
    uint64_t parent;     /* 0 for a store root */
    char *name;          /* "" for a root */
    char *path;          /* memory path, "/" for a root */
    bool is_dir;
    uint64_t size;
    int64_t mtime_ns, ctime_ns;
    int64_t atime_ns;    /* access time: set by utimensat (reads do not change it) */
    uint64_t subdirs;    /* directories: how many subdirectories it has */
    char sha[SHA256_HEX_LEN + 1];       /* hash of the current content, "" if none */
    char memory_id[CACHE_ID_MAX];       /* "" for a file never synced */
    char base_sha[SHA256_HEX_LEN + 1];  /* hash at the last sync, "" if none */
    char *base_path;                    /* path at the last sync, "" if none */
    int state;                          /* enum cnode_state */
    bool has_content;                   /* the bytes of sha are in the cache */
    bool unlinked;                      /* removed; kept while the kernel may use it */
    char refused_sha[SHA256_HEX_LEN + 1]; /* content the server refused, "" if none */
    int unsaved;                        /* enum cache_saved */
    int64_t used_ns;                    /* last open (hourly), create or save here; 0 never */
    bool evicted;                       /* its content was evicted (--cache-max-size) */
};

/* Whether a file's content is one a writer finished (cache column unsaved):
 * only SAVED content is pushed by a periodic sync; HELD content (saved by
 * a close of one descriptor while the file is still open for writing) is
 * pushed by the final sync and after a restart; NEW files (made by an open,
 * never flushed) are never pushed as they are. */
enum cache_saved { CACHE_SAVED = 0, CACHE_NEW = 1, CACHE_HELD = 2 };

void cnode_clear(struct cnode *n);

/* A call the cache makes from inside an operation, under its lock and from
 * the calling thread, the moment the operation's outcome is settled and
 * before the rest of its work (cache_create_open_then,
 * cache_save_closed_then): the caller answers the kernel then, and the
 * caller's wake-up overlaps that work.  fn must not call the cache. */
struct cache_then {
    void (*fn)(void *arg);
    void *arg;
};

/* Opens (creating as needed, mode 0700) DIR/cache.db.  *out is freed with
 * cache_close, which accepts NULL and NULLs the pointer. */
int cache_open(const char *dir, struct cache **out);
/* cache_open for a command that reads records (conflicts): when the cache
 * cannot be written (a full disk, a quota, a read-only file system), the
 * closes a stopped daemon left in its journal and the clean-up of an
 * older build's leftovers wait for a later open instead of failing this
 * one. */
int cache_open_reader(const char *dir, struct cache **out);
void cache_close(struct cache **c);
/* The cache directory's reserve of disk space (cache/reserve.c): the file
 * CACHE_DIR/reserve of bytes allocated blocks, freed by the last sync of
 * a session that finds the disk full so that it can record what it
 * pushes.  cache_reserve_keep makes it (or keeps one already there; 0
 * bytes removes it); no room for it is logged and returned (-ENOSPC...),
 * and nothing of it is left.  cache_reserve_release frees it (*freed: the
 * bytes given back, 0 when there was none) and then writes back the
 * closes a failed commit left to the journal.  cache_lacks_room: a write
 * failed for want of room (ENOSPC, EDQUOT) and nothing committed since,
 * or the directory's disk has less than CACHE_ROOM_LOW available. */
#define CACHE_RESERVE_DEFAULT ((uint64_t)24 << 20)
#define CACHE_ROOM_LOW ((uint64_t)4 << 20)
int cache_reserve_keep(struct cache *c, uint64_t bytes);
int cache_reserve_release(struct cache *c, uint64_t *freed);
/* cache_reserve_release for a cache that could not be opened for want of
 * room (a journal a stopped daemon left needs some): frees the reserve
 * of directory dir only. */
int cache_reserve_free(const char *dir, uint64_t *freed);
bool cache_lacks_room(struct cache *c);
/* Process-wide counts of the cache's WAL I/O (cache/walbuf.c): the writes
 * SQLite made to write-ahead logs, and the calls that reached the file
 * system for them (one a commit when the buffer works). */
void cache_wal_io(uint64_t *writes, uint64_t *flushes);

/* Makes sure the store has a row and a root node; gives the root's ino.
 * A new mount is a new session: the deletions an earlier session kept
 * local (log_only, disabled) end here, so those memories show again. */
int cache_store_attach(struct cache *c, const char *store_id, bool read_only,
                       uint64_t *root_ino);
/* The deletion mode of the mount that has the store now: every deletion
 * made through it records this mode (cache_unlink, cache_rename). */
int cache_store_set_mode(struct cache *c, const char *store_id, enum cache_del_mode mode);

int cache_getattr(struct cache *c, uint64_t ino, struct cnode *out);
/* The id of the store a node (any, even unlinked) belongs to; -ENOENT. */
int cache_store_of(struct cache *c, uint64_t ino, char store_out[CACHE_ID_MAX]);
int cache_lookup(struct cache *c, uint64_t parent, const char *name, struct cnode *out);

/* Children of dir with ino > after, in ino order; fn returns non-zero to
 * stop (that value is returned).  The cnode passed to fn is only valid
 * during the call. */
typedef int (*cache_node_fn)(void *arg, const struct cnode *n);
int cache_readdir(struct cache *c, uint64_t dir, uint64_t after, cache_node_fn fn, void *arg);

/* Every live file node of a store, in path order. */
int cache_store_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg);

/* Content by hash.  *buf is malloc'd (caller frees; never NULL on success,
 * even for empty content). -ENOENT when the cache lacks those bytes. */
int cache_blob_get(struct cache *c, const char *sha, char **buf, size_t *len);
/* Stores bytes under their hash (computed here when sha is NULL). */
int cache_blob_put(struct cache *c, const char *sha, const char *buf, size_t len);
/* Several blobs in one transaction (a prefetched page): all or none. */
struct cache_blob_in {
    const char *sha; /* the hash of buf, already checked */
    const char *buf;
    size_t len;
};
int cache_blobs_put(struct cache *c, const struct cache_blob_in *v, size_t n);
bool cache_blob_has(struct cache *c, const char *sha);

/* A remote memory as a listing shows it. */
struct cache_remote {
    const char *path;
    const char *memory_id;
    const char *sha;
    uint64_t size;
    int64_t mtime_ns;  /* the memory's updated_at; 0: unknown (now is used) */
};

/* What cache_apply_remote did to the tree, for kernel invalidation. */
enum cache_change_kind {
    CACHE_CH_NEW,       /* entry (parent,name) appeared: ino */
    CACHE_CH_CONTENT,   /* ino's content or size changed */
    CACHE_CH_GONE,      /* entry (parent,name) -> ino disappeared */
    CACHE_CH_BLOCKED,   /* a listed memory left out, name = its path: a
                         * local file holds a directory of its path */
};
struct cache_change {
    enum cache_change_kind kind;
    uint64_t parent, ino;
    char *name;
};
struct cache_changes {
    struct cache_change *v;
    size_t n, cap;
};
void cache_changes_free(struct cache_changes *ch);

/* Brings the clean part of a store's tree to the listing r[0..n) (which
 * must be sorted by path and hold valid paths): new memories become nodes
 * (with their directories), a changed hash on a clean file becomes the
 * file's new hash (its bytes are fetched later), a memory renamed remotely
 * moves its node (same ino), memories gone remotely are removed with their
 * now-empty implicit directories.  A node that takes the remote version
 * (new, changed or moved) gets the memory's updated_at as its mtime; an
 * unchanged one keeps its mtime (the local write time once edited).  Nodes with local changes are left alone
 * (the sync decides about them).  Records every change in *ch. */
int cache_apply_remote(struct cache *c, const char *store_id, const struct cache_remote *r,
                       size_t n, struct cache_changes *ch);

/* Counts for status and statfs. */
struct cache_store_stats {
    uint64_t files, dirs, bytes, dirty, refused, missing_content;
    uint64_t tombstones; /* memories deleted locally, not yet remotely */
    uint64_t kept_deletions; /* of those, made under log_only/disabled: never sent */
    uint64_t unsaved;    /* files created by an open, never flushed (CACHE_NEW) */
    uint64_t conflicts;  /* conflict records kept (cache/resolve.c) */
    uint64_t evicted;    /* files whose content --cache-max-size evicted (not
                          * in missing_content: fetched when opened) */
    /* Files whose last close a failed commit left to the journal of closed
     * files (the disk full since), in no other count: a dirty or refused
     * row stays in its own, and a row an open made counts here, not in
     * unsaved (a writer did close it).  0 while nothing waits. */
    uint64_t journal_waiting;
};
int cache_store_stats(struct cache *c, const char *store_id, struct cache_store_stats *st);
/* The files of a store that only the journal of closed files holds (closed
 * while the cache's disk was full, their commit rolled back: the ones
 * journal_waiting counts), by ino with the path of each one's last close,
 * sorted by ino; none unless such a failed commit is not yet applied
 * again.  *out (NULL for none): cache_jfiles_free. */
struct cache_jfile {
    uint64_t ino;
    char *path;
};
int cache_journal_files(struct cache *c, const char *store_id, struct cache_jfile **out,
                        size_t *n);
void cache_jfiles_free(struct cache_jfile *v, size_t n);
/* The fields of cache_store_stats that say what is left to push (dirty,
 * refused, unsaved, tombstones, kept_deletions; the others are 0), from
 * indexes only: its cost follows the work left, not the store's size (a
 * sync reads it after every round). */
int cache_store_pending(struct cache *c, const char *store_id, struct cache_store_stats *st);

/* What the cache last knew of every memory of a store: the baselines of
 * its files (live, with a memory id) and of its pending deletions.  The
 * strings are owned by the array; free it with cache_baselines_free. */
struct cache_base {
    char memory_id[CACHE_ID_MAX];
    char sha[SHA256_HEX_LEN + 1];
    char *path;
    uint64_t size;
    int64_t mtime_ns;
};
int cache_baselines(struct cache *c, const char *store_id, struct cache_base **out, size_t *n);
void cache_baselines_free(struct cache_base *v, size_t n);
/* Whether a sync of the store has anything local to do: a file to push
 * (CACHE_SAVED; with final, CACHE_HELD too) or a pending deletion.  Cheap
 * (indexed), for the idle fast path of a sync. */
int cache_store_has_local_work(struct cache *c, const char *store_id, bool final, bool *work);
/* Whether the cache holds nothing of the store: no file or directory
 * below its root, no pending deletion, no conflict record.  Cheap
 * (indexed); false on error. */
int cache_store_empty(struct cache *c, const char *store_id, bool *empty);

/* Every store the cache holds (mounted now or not). *out is malloc'd. */
struct cache_store {
    char id[CACHE_ID_MAX];
    bool read_only;
};
int cache_stores(struct cache *c, struct cache_store **out, size_t *n);

/* Files of the store whose content bytes are not in the cache (but for
 * content evicted on purpose, which an open fetches). */
struct cache_missing {
    char memory_id[CACHE_ID_MAX];
    char sha[SHA256_HEX_LEN + 1];
};
int cache_missing_content(struct cache *c, const char *store_id, struct cache_missing **out,
                          size_t *n);

/* The store's files by top-level directory ("/notes/"; "/" for the files
 * at the root): how many there are and how many lack their content.  For
 * the bulk prefetch, which lists a directory with its content when most
 * of it is missing. */
struct cache_content_group {
    char prefix[1040];
    uint64_t files, missing;
};
int cache_content_groups(struct cache *c, const char *store_id,
                         struct cache_content_group **out, size_t *n);

/* ---- Keeping the cache bounded (cache/gc.c; its top comment holds the
 * model).  Content is freed in the transaction that drops its last
 * reference; these run the rest. ---- */

/* Drops blobs nothing refers to (bytes stored for a listing that never
 * claimed them). */
int cache_gc_blobs(struct cache *c);

/* How big the cache is. */
struct cache_usage {
    uint64_t db_bytes, wal_bytes;  /* cache.db and its write-ahead log on disk */
    uint64_t content_bytes;        /* bytes of content held (every blob) */
    uint64_t blobs;
    uint64_t evicted_files;        /* files whose content --cache-max-size evicted */
    uint64_t reserve_bytes;        /* blocks of CACHE_DIR/reserve (cache/reserve.c) */
};
int cache_usage(struct cache *c, struct cache_usage *u);

/* What cache_housekeep keeps. */
struct cache_policy {
    uint64_t max_bytes;            /* --cache-max-size: content held; 0 no limit */
    unsigned conflicts_keep;       /* per store, the newest kept; 0 no limit */
    int64_t conflicts_max_age_ns;  /* older records go; 0 no limit */
    /* The stores this process mounts (busy knows their open files): the
     * content of their removed files that no file open here holds is
     * freed.  Other stores of a shared cache directory are left alone; an
     * entry the caller sets to NULL (atomically) is skipped. */
    const char *const *stores;
    size_t n_stores;
};
/* True when ino is open here (its content is not evicted). */
typedef bool (*cache_busy_fn)(void *arg, uint64_t ino);
struct cache_gc_report {
    uint64_t conflicts_pruned, blobs_freed, evicted, evicted_bytes;
    uint64_t unlinked_freed;       /* removed files whose content went */
    bool over_limit;               /* still over max_bytes: the rest may not go */
};
/* One round: prunes conflict records past the policy, frees content
 * nothing needs, evicts clean content past max_bytes (least recently
 * used first: opened, or created or saved here; never dirty, refused, new
 * or open files, conflict records or uploads in flight), gives free pages
 * back to the file system and trims the write-ahead log.  r may be NULL. */
int cache_housekeep(struct cache *c, const struct cache_policy *p, cache_busy_fn busy, void *arg,
                    struct cache_gc_report *r);
/* The file was opened at now_ns: recorded (an hour's granularity) as the
 * eviction order. */
int cache_mark_used(struct cache *c, uint64_t ino, int64_t now_ns);
/* Removes conflict record id (> 0; -ENOENT when there is none), or with
 * id 0 every record made before before_ns (INT64_MAX: all); their content
 * is freed.  *dropped (may be NULL) gets how many went. */
int cache_conflicts_drop(struct cache *c, int64_t id, int64_t before_ns, uint64_t *dropped);

/* ---- Local changes (cache/write.c, content in cache/content.c; the top
 * comment of write.c holds the model) ----
 * Every call below is one transaction.  On a store attached read-only each
 * returns -EROFS and changes nothing.  Names are checked with the memory
 * path rules and NAME_MAX (rules_check_name: -EINVAL, -ENAMETOOLONG); the
 * marker name at a store root is -EPERM.  Every entry made, removed or
 * renamed sets its directory's mtime and ctime to now.  now_ns / mtime_ns
 * are CLOCK_REALTIME nanoseconds. */

/* A new empty file (dirty, never synced, content "") or a directory made
 * locally (state 1).  *out (may be NULL) receives the node; cnode_clear it. */
int cache_create(struct cache *c, uint64_t parent, const char *name, bool is_dir,
                 int64_t now_ns, struct cnode *out);
/* The same for the file an open(O_CREAT) makes: it is not pushed before a
 * close or fsync saves it (cache_set_content), so a half-written file never
 * reaches the store. */
int cache_create_open(struct cache *c, uint64_t parent, const char *name, int64_t now_ns,
                      struct cnode *out);
/* cache_create_open, with then->fn(then->arg) called once the checks have
 * passed (the store writable, the parent a live directory, the name valid
 * and free) and *out holds the new node, its ino chosen, before the node's
 * row is written.  A failure after the call (the database's, never the
 * caller's input) leaves no node: the file's first save then fails with
 * -ENOENT.  Not called when a check fails. */
int cache_create_open_then(struct cache *c, uint64_t parent, const char *name, int64_t now_ns,
                           struct cnode *out, const struct cache_then *then);

/* Removes parent/name: a file (-EISDIR for a directory) or, with is_dir,
 * an empty directory (-ENOTDIR, -ENOTEMPTY).  A file that was synced
 * leaves a tombstone.  The node stays readable by ino (unlinked) while
 * the kernel may use it: the collector frees its content once nothing here
 * holds it open, and the store's next attach drops the row.  *ino (may be
 * NULL) gets the removed node's number. */
int cache_unlink(struct cache *c, uint64_t parent, const char *name, bool is_dir,
                 uint64_t *ino);
/* cache_unlink of the file at parent/name only while it is node ino;
 * -ESTALE when another node has the name now (a rename over it). */
int cache_unlink_node(struct cache *c, uint64_t parent, const char *name, uint64_t ino);

#define CACHE_RENAME_NOREPLACE 1u
/* Moves parent/name to newparent/newname (same store, else -EXDEV).  A file
 * moved over a file takes over the target's memory identity; a directory
 * may replace an empty directory only.  flags: CACHE_RENAME_NOREPLACE
 * (-EEXIST when the target exists); any other bit is -EINVAL.  -ENODATA,
 * nothing changed: a file would take a synced target's memory, and its
 * content is not in the cache (evicted, or not downloaded yet); fetch it
 * and try again. */
int cache_rename(struct cache *c, uint64_t parent, const char *name, uint64_t newparent,
                 const char *newname, unsigned flags);

/* Replaces a file's content (over MEM_CONTENT_MAX_BYTES: -EFBIG, nothing
 * changed); the file is dirty unless it is back to its baseline, and its
 * content is CACHE_SAVED.  sha_out (may be NULL) receives the new hash. */
int cache_set_content(struct cache *c, uint64_t ino, const char *buf, size_t len,
                      int64_t mtime_ns, char sha_out[SHA256_HEX_LEN + 1]);
/* The same, for bytes edited from content expect_sha (an open file's
 * buffer), saved as CACHE_HELD when held (a writer still has the file
 * open) else CACHE_SAVED.  When the node holds other content now (a sync
 * brought the store's version, or removed the file, meanwhile), the store
 * wins: the bytes are kept as a conflict record, the node is left alone,
 * and the answer is -ESTALE. */
int cache_set_content_if(struct cache *c, uint64_t ino, const char *buf, size_t len,
                         int64_t mtime_ns, const char *expect_sha, bool held,
                         char sha_out[SHA256_HEX_LEN + 1]);
/* cache_set_content_if(..., held = true, ...) for the close of one
 * descriptor (a FUSE flush), as durable (it survives kill -9 once the call
 * returns) but without a commit of its own: the content joins the lazy
 * transaction, committed with the work of the next few milliseconds, and
 * a record in the journal of closed files (cache/journal.c) keeps it until
 * then.  Other connections to the database see it at that commit. */
int cache_save_closed(struct cache *c, uint64_t ino, const char *buf, size_t len,
                      int64_t mtime_ns, const char *expect_sha, char sha_out[SHA256_HEX_LEN + 1]);
/* cache_save_closed, with then->fn(then->arg) called (once, under the
 * cache's lock, from the calling thread) the moment the close's journal
 * record is written: the content survives kill -9 from then on, and the
 * caller may answer the close while the bytes are stored and the checks'
 * outcome applied.  Not called when the save commits at once instead (the
 * journal is stuck, full or unusable, or nothing would commit later) or
 * fails before the record.  Once called, the result is 0 or -ESTALE: a
 * failure after the record abandons the transaction and leaves the record
 * to be applied again (cache/journal.c), the save is not undone. */
int cache_save_closed_then(struct cache *c, uint64_t ino, const char *buf, size_t len,
                           int64_t mtime_ns, const char *expect_sha, const struct cache_then *then,
                           char sha_out[SHA256_HEX_LEN + 1]);
/* The last writer of a file closed it (or fsynced it): content saved as
 * CACHE_HELD becomes CACHE_SAVED. */
int cache_mark_saved(struct cache *c, uint64_t ino);
/* Commits what the cache keeps uncommitted for a few milliseconds (an
 * open's new file, a first write's dirty mark; cache/saved.c), and writes
 * again the closes a failed commit left to the journal: fsync(2) of a
 * directory, whose new entries then survive a kill -9. */
int cache_settle(struct cache *c);
/* fn(arg, inos, n) is called, from the cache's own thread and without its
 * lock, with the nodes a failed commit's closes changed when they went
 * back into the database (the journal of closed files): what a reader saw
 * of them meanwhile (the rollback's state) is stale.  fn may call the
 * cache. */
void cache_on_replay(struct cache *c, void (*fn)(void *arg, const uint64_t *inos, size_t n),
                     void *arg);
/* For tests of what a crash leaves: while held, the saver commits nothing
 * on its own (no deadline), so the lazy transaction and the closes it
 * carries stay uncommitted, their content in the journal alone, until
 * another write commits them, a settle (an fsync, the sync, the
 * collector) or the close of the cache.  Nothing is lost (the journal is
 * applied at the next open); closes only commit later.  The daemon holds
 * it when MEMSTOREFS_TEST_HOLD_SAVER=1 (fs/daemon.c). */
void cache_hold_saver(struct cache *c, bool held);
/* Sets a node's access and/or modification time (utimensat, touch); a
 * NULL one is left as it is.  ctime becomes now. */
int cache_set_times(struct cache *c, uint64_t ino, const int64_t *atime_ns,
                    const int64_t *mtime_ns);
/* Marks a clean file dirty before its new content lands, so that a remote
 * listing applied meanwhile leaves it alone. */
int cache_mark_dirty(struct cache *c, uint64_t ino);

/* ---- What the sync push needs (cache/write.c) ---- */

/* Every live changed file of the store, dirty or refused (state 1 or 2),
 * whose content may be pushed (CACHE_SAVED; with final, CACHE_HELD too:
 * the last sync before the writer goes away), in path order; the cnode
 * carries the baseline (memory_id, base_sha, base_path: "" when never
 * synced).  A refused file is decided as any other (skipped while only
 * it changed; the store wins when its memory changed too): left out, it
 * kept its memory's remote edits out of the mount for good, and every
 * sync listed the store in full for it. */
/* Every live file of the store that has a memory and that the apply of a
 * listing leaves alone (state not clean: dirty, held by a writer,
 * refused), with its baseline, in no particular order.  fn returning
 * nonzero stops the walk; that value is returned. */
int cache_unsettled_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg);
int cache_dirty_files(struct cache *c, const char *store_id, bool final, cache_node_fn fn,
                      void *arg);
/* The changed files cache_store_stats counts as dirty (state 1, not a new
 * file no writer closed: saved or held, as cache_dirty_files with final),
 * in path order, read only: what an unmount's report names as not pushed.
 * cache_dirty_files applies the saved marks waiting first, a write, which
 * a full disk fails: the report then named none of them. */
int cache_unpushed_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg);
/* Every changed live file (dirty or refused), whatever its saved state
 * (cnode.unsaved), in path order, in one read: the sync pushes those a
 * writer finished, and the others keep their place in its decisions (a
 * memory one holds is not free, a deletion at its path may be its
 * file's); two reads let a file saved between them be in neither. */
int cache_changed_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg);
/* Whether a changed file's content may be pushed: a writer finished it
 * (CACHE_SAVED), or, at the final sync, it is held (CACHE_HELD). */
bool cache_pushable(const struct cnode *n, bool final);

/* A memory deleted locally, to delete remotely. */
struct cache_tombstone {
    char memory_id[CACHE_ID_MAX];
    char base_sha[SHA256_HEX_LEN + 1];
    char *base_path;
    int64_t deleted_at_ns;
    int mode;  /* enum cache_del_mode in force when it was removed */
};
/* *out is malloc'd; free it with cache_tombstones_free(*out, *n). */
int cache_tombstones(struct cache *c, const char *store_id, struct cache_tombstone **out,
                     size_t *n);
void cache_tombstones_free(struct cache_tombstone *v, size_t n);
/* Forgets a tombstone once the remote delete is done (or moot). */
int cache_tombstone_drop(struct cache *c, const char *store_id, const char *memory_id);
/* A deletion's baseline becomes (sha, path): an upload of the file made
 * before it was removed, whose answer was lost, is what the store holds. */
int cache_tombstone_rebase(struct cache *c, const char *store_id, const char *memory_id,
                           const char *sha, const char *path);

/* Records that the store holds memory_id with content sha at path, as
 * ino's new baseline (an adoption: the file already has it).  The file
 * becomes clean only if its content and path are exactly those (a write
 * meanwhile keeps it dirty).  -ENOENT when the node is not a live file
 * (removed since the caller read it: the memory is the caller's to
 * settle). */
int cache_mark_synced(struct cache *c, uint64_t ino, const char *memory_id, const char *sha,
                      const char *path);

/* ---- Uploads in flight and their answers (cache/sent.c) ---- */

/* An upload that went out (create: memory_id ""), until its answer or a
 * listing settles it.  ino follows the file through atomic saves. */
struct cache_sent {
    int64_t id;
    uint64_t ino;
    char memory_id[CACHE_ID_MAX];
    char *path;                     /* the path sent (owned) */
    char sha[SHA256_HEX_LEN + 1];   /* the content the memory holds if it applied */
    /* cache_sent_add: the node's memory when the upload was planned;
     * cache_sent_list: the node's memory now (and whether it is live). */
    char node_id[CACHE_ID_MAX];
    bool node_live;
    /* cache_sent_add: the bytes sent (NULL: the content is not sent), kept
     * as a blob while the record stands. */
    const char *content;
    size_t content_len;
    /* cache_sent_add: the same upload was recorded already (sent before,
     * its answer lost): what it meets may be its own earlier request. */
    bool resent;
};
/* Records v[0..n) (ino, memory_id, path, sha) before they are sent, in one
 * transaction; fills each id.  An upload whose node was removed, or took
 * another memory, since it was planned (node_id) is not recorded: its id
 * is -1, and it must not be sent (the next sync decides again). */
int cache_sent_add(struct cache *c, const char *store_id, struct cache_sent *v, size_t n);
/* Every record of a store, oldest first; free with cache_sent_free. */
int cache_sent_list(struct cache *c, const char *store_id, struct cache_sent **out, size_t *n);
void cache_sent_free(struct cache_sent *v, size_t n);
/* Settled without an answer to apply (refused, or a listing showed it). */
int cache_sent_drop(struct cache *c, int64_t id);
/* Forgets records older than before_ns (CLOCK_REALTIME ns). */
int cache_sent_prune(struct cache *c, const char *store_id, int64_t before_ns);

/* The answer to an upload: the store holds memory_id with (sha, path). */
struct cache_answer {
    int64_t sent_id;        /* its cache_sent record (0: none; then ino) */
    uint64_t ino;           /* the node it was sent for */
    const char *written_id; /* update: the memory the request named; create: "" */
    const char *node_id;    /* the file's memory when the write was planned */
    const char *memory_id, *sha, *path; /* what the answer says */
};
enum cache_answer_outcome {
    CACHE_ANS_APPLIED,   /* the baseline of the file that owns it now (res.ino) */
    CACHE_ANS_ORPHANED,  /* its file went meanwhile: recorded as a deletion */
    CACHE_ANS_FOREIGN,   /* it names a memory another file or deletion has:
                          * refused, nothing changed */
};
struct cache_answer_result {
    enum cache_answer_outcome outcome;
    uint64_t ino;
};
/* Applies an answer in one transaction (see the top of cache/sent.c) and
 * drops its record unless it is refused. */
int cache_push_answered(struct cache *c, const char *store_id, const struct cache_answer *a,
                        struct cache_answer_result *res);
/* The node an upload belongs to now (0 when its record is gone). */
uint64_t cache_sent_owner(struct cache *c, int64_t sent_id);
/* What the cache last knew the store held for memory_id: the baseline of
 * the live file (or deletion) that has it; *path malloc'd.  -ENOENT when
 * none has it. */
int cache_baseline_of(struct cache *c, const char *store_id, const char *memory_id,
                      char sha[SHA256_HEX_LEN + 1], char **path, uint64_t *size);
/* Whether a live file or a deletion of the store has memory_id. */
bool cache_memory_known(struct cache *c, const char *store_id, const char *memory_id);
/* A memory the store holds that no file owns any more (an upload whose
 * file was removed before its lost answer could be applied): recorded as
 * a deletion with (sha, path) and the store's deletion mode. */
int cache_orphan(struct cache *c, const char *store_id, const char *memory_id, const char *sha,
                 const char *path);

/* ---- What the sync decides about a local file (cache/resolve.c) ----
 * Each changes ino only if it still holds content expect_sha at path
 * expect_path (what the decision saw); else -EAGAIN and nothing changes,
 * and the next sync decides again. */

/* The store wins: the file goes back to its baseline (clean, hash =
 * base_sha) so that the next cache_apply_remote brings it to the remote
 * memory under the same ino. */
int cache_revert_if(struct cache *c, uint64_t ino, const char *expect_sha,
                    const char *expect_path);
/* Removes the file without a tombstone (another memory takes its path, or
 * the memory was deleted remotely).  *parent and *name (malloc'd; may be
 * NULL) tell which entry went, for the kernel. */
int cache_drop_if(struct cache *c, uint64_t ino, const char *expect_sha, const char *expect_path,
                  uint64_t *parent, char **name);
/* The remote memory is gone: the file becomes one never synced.  With
 * memory_id, only while the file still has that memory (a file moved over
 * a synced one meanwhile has taken that one's, which is not gone). */
int cache_forget_base(struct cache *c, uint64_t ino, const char *memory_id);
/* The server refused this content (sha): state refused, with the reason,
 * until the content changes (a write makes the file dirty again). */
int cache_mark_refused(struct cache *c, uint64_t ino, const char *sha, const char *why);

/* A local version that lost to the store: its bytes (already a blob) are
 * kept for the user to read back. */
enum cache_conflict_kind {
    CACHE_CONFLICT_STORE_WON = 0, /* the store's version replaced it */
    CACHE_CONFLICT_UNSAVED = 1,   /* an edit no close or fsync saved before unmount */
    CACHE_CONFLICT_CUT = 2,       /* an edit cut short by a write past the size limit */
};
/* The kind's name in `conflicts --json` and `status --json`. */
const char *cache_conflict_kind_name(int kind);
struct cache_conflict {
    int64_t id;
    int kind;                       /* enum cache_conflict_kind */
    char *path;
    char memory_id[CACHE_ID_MAX];
    char local_sha[SHA256_HEX_LEN + 1];
    char remote_sha[SHA256_HEX_LEN + 1];
    int64_t at_ns;
};
/* Records local_sha as lost at path; -EAGAIN (no record) when its bytes
 * are not in the cache (freed: the file was saved again since the caller
 * read it, so a record would name nothing). */
int cache_conflict_add(struct cache *c, const char *store_id, const char *path,
                       const char *memory_id, const char *local_sha, const char *remote_sha);
/* Every conflict record of a store (store_id NULL: of every store), newest
 * first; free with cache_conflicts_free. */
int cache_conflicts(struct cache *c, const char *store_id, struct cache_conflict **out,
                    size_t *n);
void cache_conflicts_free(struct cache_conflict *v, size_t n);
/* The lost bytes of conflict id (malloc'd). */
int cache_conflict_content(struct cache *c, int64_t id, char **buf, size_t *len);
/* An edit that is not the file's content, kept as a record of kind
 * (enum cache_conflict_kind) instead of being lost: the unsaved edit of a
 * file still open when its store is unmounted (not content a writer closed
 * or fsynced, so never pushed), or one a refused write cut short. */
int cache_keep_unsaved(struct cache *c, uint64_t ino, const char *buf, size_t len, int kind);

/* Refused files of a store with the server's reason. */
struct cache_refused {
    char *path;
    char *why;
};
int cache_refused_files(struct cache *c, const char *store_id, struct cache_refused **out,
                        size_t *n);
void cache_refused_free(struct cache_refused *v, size_t n);

/* ---- History and recovery (cache/history.c) ---- */

/* A version of a memory the daemon saw: memory_id held sha from
 * version_id on, written at at_ns. */
struct cache_vnote {
    const char *memory_id, *sha, *version_id;
    int64_t at_ns;
};
/* Records, per memory, the newest version seen of it (notes with a NULL
 * or "" version_id are skipped). */
int cache_versions_note(struct cache *c, const char *store_id, const struct cache_vnote *v,
                        size_t n);
/* Forgets the versions of memories no live file or pending deletion of
 * the store has (after a full listing). */
int cache_versions_prune(struct cache *c, const char *store_id);

/* What the read-only extended attributes user.memstore.* of a file say. */
enum cache_xstate {
    CACHE_XSTATE_CLEAN,    /* as the store has it */
    CACHE_XSTATE_DIRTY,    /* local changes not pushed yet */
    CACHE_XSTATE_REFUSED,  /* content the server refused (cnode refused) */
    CACHE_XSTATE_CONFLICT, /* a conflict record exists for its memory or path */
};
const char *cache_state_name(int state); /* "clean", "dirty", "refused", "conflict" */
struct cache_file_history {
    char memory_id[CACHE_ID_MAX];   /* "" for a file never synced */
    char version_id[CACHE_ID_MAX];  /* the store version of its baseline, "" unknown */
    int64_t updated_ns;             /* that version's time (ns), 0 unknown */
    char sha[SHA256_HEX_LEN + 1];   /* hash of the content the cache holds */
    int state;                      /* enum cache_xstate */
};
/* -ENOENT (no such node), -EISDIR (a directory). */
int cache_file_history(struct cache *c, uint64_t ino, struct cache_file_history *out);

/* The live file of the store that has memory_id (cnode_clear it); -ENOENT. */
int cache_file_of_memory(struct cache *c, const char *store_id, const char *memory_id,
                         struct cnode *out);
/* The live node (file or directory) of the store at memory path path
 * ("/" is the root; cnode_clear it); -ENOENT. */
int cache_node_at(struct cache *c, const char *store_id, const char *path, struct cnode *out);
/* The memory of the pending local deletion (tombstone) last at path; -ENOENT. */
int cache_deletion_at(struct cache *c, const char *store_id, const char *path,
                      char memory_id[CACHE_ID_MAX]);
/* Conflict record id with its store; out->path is malloc'd (free it). */
int cache_conflict_get(struct cache *c, int64_t id, char store_id[CACHE_ID_MAX],
                       struct cache_conflict *out);
/* Forgets record id once its content is the file's again (conflicts
 * restore); -ENOENT when there is none. */
int cache_conflict_restored(struct cache *c, int64_t id);

#endif
