/* sent.c - uploads in flight and their answers: which file an answer
 * belongs to once the file was renamed, atomically saved over or removed
 * while the request was out, and which uploads may have reached the store
 * without their answer (a lost reply, a timeout, a resend libcurl made).
 *
 * The table `sent` holds one row per upload (create or update) that went
 * out: the node it was for (ino), the memory it wrote ("" for a create),
 * and the path and content hash it sent.  A row is removed when its answer
 * is applied (cache_push_answered) or when the caller says the answer
 * settled it (cache_sent_drop); a row whose answer never came stays until
 * a listing shows what the store holds (the sync adopts it by hash) or it
 * ages out (cache_sent_prune).  Rows are unique per (store, ino,
 * memory_id, path, sha): sending the same bytes again only refreshes `at`.
 *
 * Identity follows the file (write.c moves the rows): when a rename puts
 * file S over file T (an editor's write-temp-then-rename save, `sed -i`),
 * T's rows move to S, because S is T from then on (it took T's memory).
 * So an answer for T lands on S:
 *   - S holds the memory the upload was for (or none, for a create): the
 *     answer is S's new baseline; S stays dirty if its content or path
 *     moved on meanwhile, and the next sync pushes that on top;
 *   - the node was removed, or holds another memory now (moved over a
 *     synced file): the memory written belongs to no file, and becomes a
 *     deletion (a tombstone with the deletion mode in force), never a
 *     deletion of a memory another file owns;
 *   - the answer names a memory id another live file (or a deletion)
 *     already has: the server answered with somebody else's memory; the
 *     answer is refused and nothing changes (CACHE_ANS_FOREIGN).
 * Every function takes c->lock for its whole duration. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_internal.h"

static int step_done(struct cache *c, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    db_finish(c, st);
    return rc == SQLITE_DONE ? 0 : db_fail(c, rc, what);
}

int cache_sent_add(struct cache *c, const char *store_id, struct cache_sent *v, size_t n)
{
    if (!n)
        return 0;
    sqlite3_stmt *find = NULL, *touch = NULL, *ins = NULL, *still = NULL;
    db_lock(c);
    int rc = db_begin(c);
    if (!rc)
        rc = db_prepare(c, "SELECT 1 FROM nodes WHERE ino = ? AND unlinked = 0"
                           " AND parent IS NOT NULL AND COALESCE(memory_id, '') = ?", &still);
    if (!rc)
        rc = db_prepare(c, "SELECT id FROM sent WHERE store = ?1 AND ino = ?2 AND memory_id = ?3"
                           " AND path = ?4 AND sha = ?5", &find);
    if (!rc)
        rc = db_prepare(c, "UPDATE sent SET at = ?2 WHERE id = ?1", &touch);
    if (!rc)
        rc = db_prepare(c, "INSERT INTO sent(store, ino, memory_id, path, sha, at)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6)", &ins);
    int64_t now = db_now_ns();
    for (size_t i = 0; !rc && i < n; i++) {
        struct cache_sent *x = &v[i];
        /* Replaced or removed since it was planned (an atomic save between
         * the decision and the request): sending it now would write a
         * memory no file has, or answer into a node that is gone. */
        sqlite3_reset(still);
        sqlite3_bind_int64(still, 1, (sqlite3_int64)x->ino);
        sqlite3_bind_text(still, 2, x->node_id, -1, SQLITE_TRANSIENT);
        int s = sqlite3_step(still);
        if (s != SQLITE_ROW && s != SQLITE_DONE) {
            rc = db_fail(c, s, "check sent");
            break;
        }
        if (s != SQLITE_ROW) {
            x->id = -1;
            continue;
        }
        sqlite3_reset(find);
        sqlite3_bind_text(find, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(find, 2, (sqlite3_int64)x->ino);
        sqlite3_bind_text(find, 3, x->memory_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(find, 4, x->path ? x->path : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(find, 5, x->sha, -1, SQLITE_TRANSIENT);
        s = sqlite3_step(find);
        if (s == SQLITE_ROW) {
            x->id = sqlite3_column_int64(find, 0);
            x->resent = true;
            sqlite3_reset(touch);
            sqlite3_bind_int64(touch, 1, x->id);
            sqlite3_bind_int64(touch, 2, now);
            if ((s = sqlite3_step(touch)) != SQLITE_DONE)
                rc = db_fail(c, s, "refresh sent");
            continue;
        }
        if (s != SQLITE_DONE) {
            rc = db_fail(c, s, "find sent");
            break;
        }
        sqlite3_reset(ins);
        sqlite3_bind_text(ins, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(ins, 2, (sqlite3_int64)x->ino);
        sqlite3_bind_text(ins, 3, x->memory_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(ins, 4, x->path ? x->path : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(ins, 5, x->sha, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(ins, 6, now);
        if ((s = sqlite3_step(ins)) != SQLITE_DONE)
            rc = db_fail(c, s, "add sent");
        else
            x->id = sqlite3_last_insert_rowid(c->db);
        /* The bytes going out stay in the cache while the record stands:
         * a save since the sync read them may have freed them, and the
         * answer makes them the file's baseline (a revert, a cut edit's
         * restore would then have to download them). */
        if (!rc && x->content)
            rc = db_blob_put(c, x->sha, x->content, x->content_len, "keep sent content");
    }
    db_finish(c, find);
    db_finish(c, touch);
    db_finish(c, ins);
    db_finish(c, still);
    if (!rc)
        rc = db_commit(c);
    if (rc)
        db_rollback(c);
    db_unlock(c);
    return rc;
}

void cache_sent_free(struct cache_sent *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].path);
    free(v);
}

static int fill_sent(sqlite3_stmt *st, void *item)
{
    struct cache_sent *x = item;
    x->id = sqlite3_column_int64(st, 0);
    x->ino = (uint64_t)sqlite3_column_int64(st, 1);
    snprintf(x->memory_id, sizeof(x->memory_id), "%s", (const char *)sqlite3_column_text(st, 2));
    x->path = strdup((const char *)sqlite3_column_text(st, 3));
    snprintf(x->sha, sizeof(x->sha), "%s", (const char *)sqlite3_column_text(st, 4));
    x->node_live = sqlite3_column_int(st, 5) != 0;
    snprintf(x->node_id, sizeof(x->node_id), "%s", (const char *)sqlite3_column_text(st, 6));
    return x->path ? 0 : -ENOMEM;
}

int cache_sent_list(struct cache *c, const char *store_id, struct cache_sent **out, size_t *n)
{
    sqlite3_stmt *st;
    void *items = NULL;
    *out = NULL;
    *n = 0;
    db_lock(c);
    int rc = db_prepare(c, "SELECT s.id, s.ino, s.memory_id, s.path, s.sha,"
                           " COALESCE(n.unlinked = 0 AND n.parent IS NOT NULL, 0),"
                           " COALESCE(n.memory_id, '')"
                           " FROM sent s LEFT JOIN nodes n ON n.ino = s.ino"
                           " WHERE s.store = ? ORDER BY s.id", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        rc = db_collect(c, st, sizeof(**out), &items, n, fill_sent, "list sent");
        *out = items;
    }
    db_unlock(c);
    if (rc) {
        cache_sent_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int cache_sent_drop(struct cache *c, int64_t id)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "DELETE FROM sent WHERE id = ?", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, id);
        rc = step_done(c, st, "drop sent");
    }
    return db_unlock_rc(c, rc);
}

int cache_sent_prune(struct cache *c, const char *store_id, int64_t before_ns)
{
    sqlite3_stmt *st;
    db_lock(c);
    int rc = db_prepare(c, "DELETE FROM sent WHERE store = ? AND at < ?", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, before_ns);
        rc = step_done(c, st, "prune sent");
    }
    return db_unlock_rc(c, rc);
}

/* The store's mode for deletions recorded now. */
static int store_mode(struct cache *c, const char *store_id)
{
    sqlite3_stmt *st;
    int mode = CACHE_DEL_ENABLED;
    if (db_prepare(c, "SELECT deletions FROM stores WHERE id = ?", &st) == 0) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW)
            mode = sqlite3_column_int(st, 0);
        db_finish(c, st);
    }
    return mode;
}

int db_tombstone(struct cache *c, const char *store_id, const char *memory_id, const char *sha,
                 const char *path, int mode)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "INSERT OR REPLACE INTO tombstones(store, memory_id, base_sha,"
                           " base_path, deleted_at, mode)"
                           " VALUES (?1, ?2, NULLIF(?3, ''), NULLIF(?4, ''), ?5, ?6)", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, memory_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, sha ? sha : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, path ? path : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, db_now_ns());
    sqlite3_bind_int(st, 6, mode < 0 ? store_mode(c, store_id) : mode);
    return step_done(c, st, "add tombstone");
}

/* Whether memory_id is already some other local file's, or a deletion's. */
static int foreign_id(struct cache *c, const char *store_id, const char *memory_id,
                      uint64_t ino, bool *foreign)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "SELECT 1 FROM nodes WHERE store = ?1 AND memory_id = ?2"
                           " AND ino != ?3 AND unlinked = 0 AND parent IS NOT NULL"
                           " UNION ALL SELECT 1 FROM tombstones WHERE store = ?1"
                           " AND memory_id = ?2 LIMIT 1", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, memory_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)ino);
    int s = sqlite3_step(st);
    *foreign = s == SQLITE_ROW;
    db_finish(c, st);
    return s == SQLITE_ROW || s == SQLITE_DONE ? 0 : db_fail(c, s, "check memory id");
}

/* The live file that has memory_id, 0 if none. */
static int live_owner(struct cache *c, const char *store_id, const char *memory_id,
                      uint64_t *ino)
{
    sqlite3_stmt *st;
    *ino = 0;
    int rc = db_prepare(c, "SELECT ino FROM nodes WHERE store = ? AND memory_id = ?"
                           " AND unlinked = 0 AND parent IS NOT NULL AND is_dir = 0 LIMIT 1",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, memory_id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW)
        *ino = (uint64_t)sqlite3_column_int64(st, 0);
    db_finish(c, st);
    return 0;
}

struct target {
    uint64_t ino;
    bool live;
    char memory_id[CACHE_ID_MAX];
};

/* The node an upload belongs to now: its sent row's (which moved with
 * atomic saves), else ino. */
static int find_target(struct cache *c, int64_t sent_id, uint64_t ino, struct target *t)
{
    sqlite3_stmt *st;
    memset(t, 0, sizeof(*t));
    int rc;
    if (sent_id > 0) {
        rc = db_prepare(c, "SELECT ino FROM sent WHERE id = ?", &st);
        if (rc)
            return rc;
        sqlite3_bind_int64(st, 1, sent_id);
        if (sqlite3_step(st) == SQLITE_ROW)
            ino = (uint64_t)sqlite3_column_int64(st, 0);
        db_finish(c, st);
    }
    t->ino = ino;
    rc = db_prepare(c, "SELECT COALESCE(memory_id, ''), unlinked = 0 AND parent IS NOT NULL"
                       " FROM nodes WHERE ino = ? AND ino > 2 AND is_dir = 0", &st);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
    if (sqlite3_step(st) == SQLITE_ROW) {
        snprintf(t->memory_id, sizeof(t->memory_id), "%s",
                 (const char *)sqlite3_column_text(st, 0));
        t->live = sqlite3_column_int(st, 1) != 0;
    }
    db_finish(c, st);
    return 0;
}

/* The store now holds sha at path for the file: its baseline.  The file is
 * clean if it is that, else dirty, even when it was clean against the old
 * baseline (edited back to it, or a rename undone, while the upload was
 * out): a clean file is brought to the store's version at the next sync,
 * which would undo that last edit.  A refused file stays refused. */
static int set_baseline(struct cache *c, uint64_t ino, const char *memory_id, const char *sha,
                        const char *path)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "UPDATE nodes SET memory_id = ?1, base_sha = ?2, base_path = ?3,"
                           " state = CASE WHEN sha IS ?2 AND path IS ?3 THEN 0"
                           " WHEN state = 0 THEN 1 ELSE state END"
                           " WHERE ino = ?4", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, memory_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)ino);
    return step_done(c, st, "mark synced");
}

/* File ino, which had memory `given`, has just taken memory `taken` (a
 * content update of another file's memory: names swapped, or turned in a
 * cycle).  The other live file that still has `taken` gets `given` in
 * exchange, with ino's old baseline, which is what the store holds of it
 * as far as the cache knows: one memory, one file.  Left with `taken`, a
 * file whose own update failed met `taken`'s new content at the next sync
 * as a remote change against its local rename, and was brought to it,
 * its content lost. */
static int hand_over(struct cache *c, const char *store_id, uint64_t ino, const char *taken,
                     const char *given)
{
    sqlite3_stmt *st;
    int rc = db_prepare(c, "UPDATE nodes SET memory_id = ?3,"
                           " base_sha = (SELECT base_sha FROM nodes WHERE ino = ?4),"
                           " base_path = (SELECT base_path FROM nodes WHERE ino = ?4),"
                           " state = CASE WHEN sha IS (SELECT base_sha FROM nodes WHERE ino = ?4)"
                           " AND path IS (SELECT base_path FROM nodes WHERE ino = ?4) THEN 0"
                           " WHEN state = 0 THEN 1 ELSE state END"
                           " WHERE store = ?1 AND memory_id = ?2 AND ino != ?4 AND unlinked = 0"
                           " AND parent IS NOT NULL AND is_dir = 0", &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, taken, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, given, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)ino);
    return step_done(c, st, "hand a memory over");
}

int cache_push_answered(struct cache *c, const char *store_id, const struct cache_answer *a,
                        struct cache_answer_result *res)
{
    memset(res, 0, sizeof(*res));
    uint64_t owner = 0;
    const char *written = a->written_id ? a->written_id : "";
    const char *node_id = a->node_id ? a->node_id : "";
    db_lock(c);
    int rc = db_begin(c);
    struct target t;
    if (!rc)
        rc = find_target(c, a->sent_id, a->ino, &t);
    bool foreign = false;
    if (!rc && written[0])
        foreign = strcmp(written, a->memory_id) != 0; /* answered about another memory */
    else if (!rc && strcmp(t.memory_id, a->memory_id) != 0)
        rc = foreign_id(c, store_id, a->memory_id, t.ino, &foreign);
    if (rc)
        goto out;
    if (foreign) {
        res->outcome = CACHE_ANS_FOREIGN;
    } else if (t.live && (strcmp(t.memory_id, a->memory_id) == 0 ||
                          strcmp(t.memory_id, node_id) == 0)) {
        if (t.memory_id[0] && strcmp(t.memory_id, a->memory_id) != 0)
            rc = hand_over(c, store_id, t.ino, a->memory_id, t.memory_id);
        if (!rc)
            rc = set_baseline(c, t.ino, a->memory_id, a->sha, a->path);
        res->outcome = CACHE_ANS_APPLIED;
        res->ino = t.ino;
    } else if ((rc = live_owner(c, store_id, a->memory_id, &owner)) == 0 && owner) {
        /* Another file has that memory now (it took it over): the answer
         * is that file's baseline, never a deletion of its memory. */
        rc = set_baseline(c, owner, a->memory_id, a->sha, a->path);
        res->outcome = CACHE_ANS_APPLIED;
        res->ino = owner;
    } else if (!rc) {
        /* Removed, or given another memory's identity, while the request
         * was out: the memory written belongs to no file any more. */
        rc = db_tombstone(c, store_id, a->memory_id, a->sha, a->path, -1);
        res->outcome = CACHE_ANS_ORPHANED;
        res->ino = t.ino;
    }
    if (!rc && a->sent_id > 0 && res->outcome != CACHE_ANS_FOREIGN) {
        sqlite3_stmt *st;
        rc = db_prepare(c, "DELETE FROM sent WHERE id = ?", &st);
        if (!rc) {
            sqlite3_bind_int64(st, 1, a->sent_id);
            rc = step_done(c, st, "settle sent");
        }
    }
out:
    if (!rc)
        rc = db_commit(c);
    if (rc)
        db_rollback(c);
    db_unlock(c);
    return rc;
}

uint64_t cache_sent_owner(struct cache *c, int64_t sent_id)
{
    sqlite3_stmt *st;
    uint64_t ino = 0;
    db_lock(c);
    if (db_prepare(c, "SELECT ino FROM sent WHERE id = ?", &st) == 0) {
        sqlite3_bind_int64(st, 1, sent_id);
        if (sqlite3_step(st) == SQLITE_ROW)
            ino = (uint64_t)sqlite3_column_int64(st, 0);
        db_finish(c, st);
    }
    db_unlock(c);
    return ino;
}

int cache_baseline_of(struct cache *c, const char *store_id, const char *memory_id,
                      char sha[SHA256_HEX_LEN + 1], char **path, uint64_t *size)
{
    sqlite3_stmt *st;
    *path = NULL;
    db_lock(c);
    int rc = db_prepare(c, "SELECT base_sha, base_path, COALESCE((SELECT length(data) FROM blobs b"
                           " WHERE b.sha = nodes.base_sha), size) FROM nodes WHERE store = ?1"
                           " AND memory_id = ?2 AND unlinked = 0 AND base_sha IS NOT NULL"
                           " AND base_path IS NOT NULL"
                           " UNION ALL SELECT base_sha, base_path, 0 FROM tombstones"
                           " WHERE store = ?1 AND memory_id = ?2 AND base_sha IS NOT NULL"
                           " AND base_path IS NOT NULL LIMIT 1", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, store_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, memory_id, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW) {
            snprintf(sha, SHA256_HEX_LEN + 1, "%s", (const char *)sqlite3_column_text(st, 0));
            *path = strdup((const char *)sqlite3_column_text(st, 1));
            *size = (uint64_t)sqlite3_column_int64(st, 2);
            rc = *path ? 0 : -ENOMEM;
        } else {
            rc = -ENOENT;
        }
        db_finish(c, st);
    }
    db_unlock(c);
    return rc;
}

bool cache_memory_known(struct cache *c, const char *store_id, const char *memory_id)
{
    bool known = true; /* on error: assume it is, so nothing is taken over */
    db_lock(c);
    foreign_id(c, store_id, memory_id, 0, &known);
    db_unlock(c);
    return known;
}

int cache_mark_synced(struct cache *c, uint64_t ino, const char *memory_id, const char *sha,
                      const char *path)
{
    db_lock(c);
    sqlite3_stmt *st;
    /* Only a live file: a memory given to a removed one (removed since
     * the sync read it) came back into the mount with the next listing,
     * its deletion never sent. */
    int rc = db_prepare(c, "SELECT 1 FROM nodes WHERE ino = ? AND ino > 2 AND is_dir = 0"
                           " AND unlinked = 0 AND parent IS NOT NULL", &st);
    if (!rc) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)ino);
        int s = sqlite3_step(st);
        rc = s == SQLITE_ROW ? 0 : s == SQLITE_DONE ? -ENOENT : db_fail(c, s, "mark synced");
        db_finish(c, st);
    }
    if (!rc)
        rc = set_baseline(c, ino, memory_id, sha, path);
    return db_unlock_rc(c, rc);
}

int cache_orphan(struct cache *c, const char *store_id, const char *memory_id, const char *sha,
                 const char *path)
{
    db_lock(c);
    int rc = db_tombstone(c, store_id, memory_id, sha, path, -1);
    return db_unlock_rc(c, rc);
}
