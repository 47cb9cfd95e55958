/* jrename.c - a rename as durable as a close, without a commit of its own.
 *
 * An editor's save (write a temporary file, then rename it over the file)
 * and `sed -i` end with a rename; it committed at once, carrying the
 * closes before it, and that commit was the largest part of the rename.
 * Here a rename joins the lazy transaction (cache/saved.c) as a close does,
 * and what keeps it through a kill -9 until that transaction's commit is a
 * record in the journal of closed files (cache/journal.c), appended before
 * the call returns: the store, the source's ino and path, the destination
 * path and the flags.
 *
 * Replay (db_journal_rename, from journal.c, in the records' order) runs
 * the same rename again by path: the closes before it in the journal have
 * put back the files they saved (a file whose create died with the daemon
 * comes back at its path, with a new ino), so the source is found by its
 * ino when that node is still at the record's path, else by the path.  A
 * rename that cannot be made again (its source is gone: a file renamed
 * while still open before any close saved it, whose create died too; the
 * store became read-only) is logged and skipped: what it moved is where it
 * was before the rename, nothing is lost.  Each replayed rename is a
 * savepoint of the replay's transaction, so a failed one changes nothing.
 *
 * Invariants: those of the journal (every rename no commit has made
 * durable has its record, after the records of the closes before it);
 * a rename the journal cannot take (no journal, stuck, full) commits at
 * once, as before. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"
#include "log.h"
#include "sha256.h"

/* The room a rename record asks of the journal: its destination path. */
#define JRENAME_ROOM 4096

int cache_rename(struct cache *c, uint64_t parent, const char *name, uint64_t newparent,
                 const char *newname, unsigned flags)
{
    if (flags & ~CACHE_RENAME_NOREPLACE)
        return -EINVAL;
    struct db_rename a = {.parent = parent, .newparent = newparent, .name = name,
                          .newname = newname, .flags = flags};
    db_lock(c);
    bool journal = db_journal_ready(c, JRENAME_ROOM), first = false;
    a.where = journal;
    int rc = db_begin(c);
    if (!rc)
        rc = db_rename_tx(c, &a);
    journal = journal && a.to;
    if (!rc && journal)
        rc = db_journal_begin(c, &first);
    if (!rc)
        rc = journal ? db_commit_lazy(c) : db_commit(c);
    if (rc) {
        if (journal)
            db_journal_unbegin(c, first);
        db_rollback(c);
    } else if (journal && c->lazy) {
        char sha[SHA256_HEX_LEN + 1];
        size_t len = strlen(a.to);
        sha256_hex(a.to, len, sha);
        struct db_jrec r = {.kind = DB_JREC_RENAME, .ino = a.ino, .store = a.store,
                            .path = a.from, .sha = sha, .mtime = db_now_ns(),
                            .held = (flags & CACHE_RENAME_NOREPLACE) != 0, .buf = a.to,
                            .len = len};
        if (db_journal_add(c, &r) != 0)
            rc = db_settle(c); /* durable the other way: a commit */
    }
    db_unlock(c);
    free(a.from);
    free(a.to);
    return rc;
}

/* The live node at path in store (a file or a directory); 0 if none. */
static uint64_t node_at(struct cache *c, const char *store, const char *path)
{
    sqlite3_stmt *st;
    if (db_prepare(c, "SELECT ino FROM nodes WHERE store = ?1 AND path = ?2 AND unlinked = 0"
                      " AND ino > 2", &st))
        return 0;
    sqlite3_bind_text(st, 1, store, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
    uint64_t ino = sqlite3_step(st) == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    db_finish(c, st);
    return ino;
}

/* The record's source: its own node if still at from, else the node at from. */
static int source(struct cache *c, uint64_t ino, const char *store, const char *from,
                  struct cnode *n)
{
    if (db_get_node(c, ino, n) == 0) {
        if (!n->unlinked && strcmp(n->path, from) == 0 && n->parent)
            return 0; /* inos are never reused: the same node */
        cnode_clear(n);
    }
    uint64_t at = node_at(c, store, from);
    return at ? db_get_node(c, at, n) : -ENOENT;
}

int db_journal_rename(struct cache *c, uint64_t ino, const char *store, const char *from,
                      const char *to, size_t to_len, unsigned flags)
{
    char *dst = strndup(to, to_len);
    if (!dst)
        return -ENOMEM;
    struct cnode src = {0};
    int rc = source(c, ino, store, from, &src);
    char *slash = strrchr(dst, '/');
    uint64_t newparent = 0;
    if (!rc && (!slash || !slash[1]))
        rc = -EINVAL;
    if (!rc) {
        *slash = '\0';
        newparent = node_at(c, store, slash == dst ? "/" : dst);
        *slash = '/';
        if (!newparent)
            rc = -ENOENT;
    }
    if (!rc)
        rc = db_exec(c, "SAVEPOINT jrename");
    if (!rc) {
        struct db_rename a = {.parent = src.parent, .newparent = newparent, .name = src.name,
                              .newname = slash + 1, .flags = flags};
        rc = db_rename_tx(c, &a);
        if (rc)
            sqlite3_exec(c->db, "ROLLBACK TO jrename", NULL, NULL, NULL);
        sqlite3_exec(c->db, "RELEASE jrename", NULL, NULL, NULL);
    }
    switch (rc) {
    case 0:
        break;
    case -ENOENT: case -EEXIST: case -EISDIR: case -ENOTDIR: case -ENOTEMPTY: case -EINVAL:
    case -EXDEV: case -EPERM: case -EROFS: case -ENAMETOOLONG:
        log_warn("a rename of the journal cannot be made again; what it moved stays where it "
                 "was", "store", store, "from", from, "to", dst, "error", strerror(-rc));
        rc = 0;
        break;
    default:
        break; /* the replay stops and is tried again */
    }
    cnode_clear(&src);
    free(dst);
    return rc;
}
