/* history.h - memory history and recovery (docs/history.md): what the
 * files of fs/ that implement it share.
 *
 *   history.c        the commands log, show, restore (the client side)
 *   conflicts_act.c  conflicts restore ID, conflicts diff ID
 *   histserve.c      the daemon's side: the "hist-..." control commands,
 *                    each served on a detached thread of its own
 *   restore.c        the local edit a restore makes (cache + kernel)
 *   xattr.c          the read-only user.memstore.* attributes */
#ifndef MFS_FS_HISTORY_H
#define MFS_FS_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cache.h"

struct daemon;
struct fs_store;

/* ---- the client (history.c) ---- */

int history_log_main(int argc, char **argv);
int history_show_main(int argc, char **argv);
int history_restore_main(int argc, char **argv);

/* Where a path given on the command line is: the mount that holds it
 * (found from the store lock files) and the memory path inside it. */
struct hist_target {
    pid_t pid;                /* its daemon */
    char store_id[128];
    char mount_path[4096];
    char rel[4200];           /* "/" for the mount point itself */
    char abs[8300];           /* the path as absolute, for messages */
};
/* 0, or 1 after printing why on stderr (prefixed "memstorefs CMD: "). */
int hist_resolve(const char *cmd, const char *arg, struct hist_target *t);
/* Sends a control command and copies the answer (but its verdict line)
 * to *out (malloc'd, *len bytes).  0, or 1 after printing the reason. */
int hist_ask(const char *cmd, pid_t pid, const char *line, char **out, size_t *len);
/* A "data N\n<N bytes>\n" frame at *p (advanced past it); -EPROTO when
 * malformed. */
int hist_take_data(const char **p, const char *end, const char **bytes, size_t *n);

/* ---- the caches conflict records are in (conflicts_caches.c) ---- */

/* The cache directories a conflicts command reads: dir when given, else
 * the one of each mount of the runtime directory (live or dead: their
 * lock files name it) and the default one; only those that hold a cache,
 * each once, in the order of their paths.  *v (conflict_caches_free) and
 * *n; -ENOENT when none does, -ENOMEM; the reason printed. */
int conflict_caches(const char *dir, char ***v, size_t *n);
void conflict_caches_free(char **v, size_t n);
/* cache_open, saying why it failed. */
int conflict_open(const char *dir, struct cache **c);
/* Opens the one cache of v that holds record id (*c, cache_close it; *dir,
 * unless NULL, is v's string of it): 0,
 * -ENOENT when none does (not printed), -EEXIST (several: ids are per
 * cache) or -EIO when a cache could not be read and the record is in no
 * other, or, when sure (an id to drop), in one other only; those printed.
 * Without sure, a record found in one cache is taken though another could
 * not be read (its reason printed). */
int conflict_holder(char **v, size_t n, long long id, bool sure, struct cache **c,
                    const char **dir);
/* A number of at least min (an id: 1; days: 0). */
bool conflict_parse_id(const char *arg, long long min, long long *out);

/* ---- conflicts restore / diff (conflicts_act.c) ---- */

/* `memstorefs conflicts restore|diff ID`: the exit status. */
int conflicts_act(const char *cmd, const char *id, const char *cache_dir);
/* What a conflict record is diffed against: the file that has its memory
 * now, or the file at its path.  *cur (malloc'd, NULL when there is no
 * such file: cur_path ""), cur_path (the memory path of that file), other
 * (the memory of that file when it is another memory's, which restore
 * does not write into; "" else).  -ENODATA when the file's content is not
 * in the cache. */
int conflict_current(struct cache *c, const char *store_id, const struct cache_conflict *k,
                     char **cur, size_t *cur_len, char *cur_path, size_t pathlen,
                     char other[CACHE_ID_MAX]);
/* The diff's label of that file: mount + path, and what other means. */
void conflict_label(char *buf, size_t len, const char *mount, const char *path,
                    const char *other);

/* ---- the daemon (histserve.c) ---- */

/* Serves a "hist-..." control line on fd; true when a thread of its own
 * now answers and closes fd. */
bool hist_serve(struct daemon *d, int fd, const char *line);
/* Waits (bounded) for those threads at teardown: false when one still runs. */
bool hist_drain(int timeout_s);
/* A failed API call as one line for the user: what, then why (the server
 * unreachable, overloaded, refusing the credential, or its answer). */
struct api_error;
void hist_api_why(const struct daemon *d, int rc, const struct api_error *e, const char *what,
                  char *why, size_t whylen);

/* histlog.c: the answers to log PATH and log --deleted DIR (rel: the
 * memory path in store s); 0, or a negative errno with why set. */
int hist_log(struct daemon *d, struct fs_store *s, const char *rel, bool json, FILE *out,
             char *why, size_t whylen);
int hist_deleted(struct daemon *d, struct fs_store *s, const char *rel, bool json, FILE *out,
                 char *why, size_t whylen);

/* ---- the edit (restore.c) ---- */

struct restore_done {
    bool unchanged;      /* the file held those bytes already */
    bool created;        /* a new file was made (with its missing directories) */
    bool kept_conflict;  /* unpushed content it replaced was kept as a record */
};
/* What the caller checked is at the path, checked again once the
 * store's syncs are held off (a sync may have moved, removed or replaced
 * the file since): a file of memory_id (NULL: none may be replaced), a
 * file never synced (may_unsynced), or nothing (may_create). */
struct restore_want {
    const char *memory_id;
    bool may_unsynced;
    bool may_create;
};
/* Makes buf the content of the file at memory path `path` of store s, as
 * a write and close through the mount would: saved in the cache (dirty:
 * the next sync pushes it), the kernel's pages and attributes of it
 * dropped.  A missing file is created, with its missing directories.
 * Local content not pushed yet that it replaces is kept as a conflict
 * record first.  -EROFS (read-only store), -EISDIR, -ENOTDIR, -EBUSY (the
 * file is open for writing), -ESTALE (what is at the path is not what
 * want says), or another negative errno. */
int restore_write(struct daemon *d, struct fs_store *s, const char *path, const char *buf,
                  size_t len, const struct restore_want *want, struct restore_done *done);
/* The file of memory path `path` of store s (live), or -ENOENT. */
int restore_node_at(struct daemon *d, struct fs_store *s, const char *path, struct cnode *out);

#endif
