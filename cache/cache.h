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
 * for path and name, which cnode_clear frees). */
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
    int state;                          /* enum cnode_state */
    bool has_content;                   /* the bytes of sha are in the cache */
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
 * now-empty implicit directories.  Nodes with local changes are left alone
 * (the sync decides about them).  Records every change in *ch. */
int cache_apply_remote(struct cache *c, const char *store_id, const struct cache_remote *r,
                       size_t n, struct cache_changes *ch);

/* Counts for status and statfs. */
struct cache_store_stats {
    uint64_t files, dirs, bytes, dirty, refused, missing_content;
};
int cache_store_stats(struct cache *c, const char *store_id, struct cache_store_stats *st);

/* Files of the store whose content bytes are not in the cache. */
struct cache_missing {
    char memory_id[CACHE_ID_MAX];
    char sha[SHA256_HEX_LEN + 1];
};
int cache_missing_content(struct cache *c, const char *store_id, struct cache_missing **out,
                          size_t *n);

/* Drops blobs that no node references (after a store's tree is loaded). */
int cache_gc_blobs(struct cache *c);

#endif
