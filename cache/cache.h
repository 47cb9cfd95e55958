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
    char sha[SHA256_HEX_LEN + 1];       /* hash of the current content, "" if none */
    char memory_id[CACHE_ID_MAX];       /* "" for a file never synced */
    char base_sha[SHA256_HEX_LEN + 1];  /* hash at the last sync, "" if none */
    char *base_path;                    /* path at the last sync, "" if none */
    int state;                          /* enum cnode_state */
    bool has_content;                   /* the bytes of sha are in the cache */
    bool unlinked;                      /* removed; kept while the kernel may use it */
    char refused_sha[SHA256_HEX_LEN + 1]; /* content the server refused, "" if none */
};

void cnode_clear(struct cnode *n);

/* Opens (creating as needed, mode 0700) DIR/cache.db.  *out is freed with
 * cache_close, which accepts NULL and NULLs the pointer. */
int cache_open(const char *dir, struct cache **out);
void cache_close(struct cache **c);

/* Makes sure the store has a row and a root node; gives the root's ino. */
int cache_store_attach(struct cache *c, const char *store_id, bool read_only,
                       uint64_t *root_ino);

int cache_getattr(struct cache *c, uint64_t ino, struct cnode *out);
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
    uint64_t conflicts;  /* conflict records kept (cache/resolve.c) */
};
int cache_store_stats(struct cache *c, const char *store_id, struct cache_store_stats *st);

/* Every store the cache holds (mounted now or not). *out is malloc'd. */
struct cache_store {
    char id[CACHE_ID_MAX];
    bool read_only;
};
int cache_stores(struct cache *c, struct cache_store **out, size_t *n);

/* Files of the store whose content bytes are not in the cache. */
struct cache_missing {
    char memory_id[CACHE_ID_MAX];
    char sha[SHA256_HEX_LEN + 1];
};
int cache_missing_content(struct cache *c, const char *store_id, struct cache_missing **out,
                          size_t *n);

/* Drops blobs that no node references (after a store's tree is loaded). */
int cache_gc_blobs(struct cache *c);

/* ---- Local changes (cache/write.c; its top comment holds the model) ----
 * Every call below is one transaction.  On a store attached read-only each
 * returns -EROFS and changes nothing.  Names are checked with the memory
 * path rules (-EINVAL, -ENAMETOOLONG); the marker name at a store root is
 * -EPERM.  now_ns / mtime_ns are CLOCK_REALTIME nanoseconds. */

/* A new empty file (dirty, never synced, content "") or a directory made
 * locally (state 1).  *out (may be NULL) receives the node; cnode_clear it. */
int cache_create(struct cache *c, uint64_t parent, const char *name, bool is_dir,
                 int64_t now_ns, struct cnode *out);

/* Removes parent/name: a file (-EISDIR for a directory) or, with is_dir,
 * an empty directory (-ENOTDIR, -ENOTEMPTY).  A file that was synced
 * leaves a tombstone.  The node stays readable by ino (unlinked) until the
 * next cache_open.  *ino (may be NULL) gets the removed node's number. */
int cache_unlink(struct cache *c, uint64_t parent, const char *name, bool is_dir,
                 uint64_t *ino);

#define CACHE_RENAME_NOREPLACE 1u
/* Moves parent/name to newparent/newname (same store, else -EXDEV).  A file
 * moved over a file takes over the target's memory identity; a directory
 * may replace an empty directory only.  flags: CACHE_RENAME_NOREPLACE
 * (-EEXIST when the target exists); any other bit is -EINVAL. */
int cache_rename(struct cache *c, uint64_t parent, const char *name, uint64_t newparent,
                 const char *newname, unsigned flags);

/* Replaces a file's content (over MEM_CONTENT_MAX_BYTES: -EFBIG, nothing
 * changed); the file is dirty unless it is back to its baseline.  sha_out
 * (may be NULL) receives the new hash. */
int cache_set_content(struct cache *c, uint64_t ino, const char *buf, size_t len,
                      int64_t mtime_ns, char sha_out[SHA256_HEX_LEN + 1]);
/* The same, for bytes edited from content expect_sha (an open file's
 * buffer): when the node holds other content now (a sync brought the
 * store's version, or removed the file, meanwhile), the store wins: the
 * bytes are kept as a conflict record, the node is left alone, and the
 * answer is -ESTALE. */
int cache_set_content_if(struct cache *c, uint64_t ino, const char *buf, size_t len,
                         int64_t mtime_ns, const char *expect_sha,
                         char sha_out[SHA256_HEX_LEN + 1]);
/* Sets a node's modification time (touch). */
int cache_set_mtime(struct cache *c, uint64_t ino, int64_t mtime_ns);
/* Marks a clean file dirty before its new content lands, so that a remote
 * listing applied meanwhile leaves it alone. */
int cache_mark_dirty(struct cache *c, uint64_t ino);

/* ---- What the sync push needs (cache/write.c) ---- */

/* Every live dirty file of the store (state 1), in path order; the cnode
 * carries the baseline (memory_id, base_sha, base_path: "" when never
 * synced). */
int cache_dirty_files(struct cache *c, const char *store_id, cache_node_fn fn, void *arg);

/* A memory deleted locally, to delete remotely. */
struct cache_tombstone {
    char memory_id[CACHE_ID_MAX];
    char base_sha[SHA256_HEX_LEN + 1];
    char *base_path;
    int64_t deleted_at_ns;
};
/* *out is malloc'd; free it with cache_tombstones_free(*out, *n). */
int cache_tombstones(struct cache *c, const char *store_id, struct cache_tombstone **out,
                     size_t *n);
void cache_tombstones_free(struct cache_tombstone *v, size_t n);
/* Forgets a tombstone once the remote delete is done (or moot). */
int cache_tombstone_drop(struct cache *c, const char *store_id, const char *memory_id);

/* Records that ino was pushed as memory_id with content sha at path: that
 * is its new baseline.  The file becomes clean only if its content and
 * path are still exactly what was pushed (a write meanwhile keeps it
 * dirty).  -ENOENT when the node is gone. */
int cache_mark_synced(struct cache *c, uint64_t ino, const char *memory_id, const char *sha,
                      const char *path);
/* The same for an answer that arrives after the request was in flight:
 * expect_id is the memory the file had when the write was planned ("" for
 * none).  If the file was removed meanwhile, or took another memory's
 * identity, the memory pushed is recorded as deleted locally (a tombstone
 * with what it holds now) so the next sync deletes it. */
int cache_mark_synced_if(struct cache *c, uint64_t ino, const char *expect_id,
                         const char *memory_id, const char *sha, const char *path);

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
/* The remote memory is gone: the file becomes one never synced. */
int cache_forget_base(struct cache *c, uint64_t ino);
/* The server refused this content (sha): state refused, with the reason,
 * until the content changes (a write makes the file dirty again). */
int cache_mark_refused(struct cache *c, uint64_t ino, const char *sha, const char *why);

/* A local version that lost to the store: its bytes (already a blob) are
 * kept for the user to read back. */
struct cache_conflict {
    int64_t id;
    char *path;
    char memory_id[CACHE_ID_MAX];
    char local_sha[SHA256_HEX_LEN + 1];
    char remote_sha[SHA256_HEX_LEN + 1];
    int64_t at_ns;
};
int cache_conflict_add(struct cache *c, const char *store_id, const char *path,
                       const char *memory_id, const char *local_sha, const char *remote_sha);
/* Every conflict record of a store (store_id NULL: of every store), newest
 * first; free with cache_conflicts_free. */
int cache_conflicts(struct cache *c, const char *store_id, struct cache_conflict **out,
                    size_t *n);
void cache_conflicts_free(struct cache_conflict *v, size_t n);
/* The lost bytes of conflict id (malloc'd). */
int cache_conflict_content(struct cache *c, int64_t id, char **buf, size_t *len);

/* Refused files of a store with the server's reason. */
struct cache_refused {
    char *path;
    char *why;
};
int cache_refused_files(struct cache *c, const char *store_id, struct cache_refused **out,
                        size_t *n);
void cache_refused_free(struct cache_refused *v, size_t n);

#endif
