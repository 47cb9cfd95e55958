/* reconcile.c - the sync engine's per-memory decision (rec_decide), the
 * per-sync delete cap (rec_delete_cap) and the classification of a write's
 * result into its follow-up (rec_classify).
 *
 * Owns no state: every function is pure (no I/O, no allocation, no
 * logging, no clock, no locks), so the whole table below is unit-tested
 * row by row (tests/test_reconcile.c).  The engine lists the store, builds
 * one struct rec_in per memory id (and per never-synced path), applies the
 * decisions, and logs out->msg at out->level.
 *
 * Notation: B = baseline (memory_id, base_sha, base_path at the last
 * successful sync), L = local file (sha, path), T = tombstone (deleted
 * through the mount; keeps B), R = the listed remote memory (by memory_id;
 * for a path without a baseline, the memory at that path).  "changed"
 * compares both content and path: a local rename keeps the memory id and
 * is a local change; a remote rename is a remote change.  The hashes and
 * paths decide, never the dirty flag alone: a clean-flagged file whose hash
 * differs from B is still pushed (nothing lost), a dirty file equal to B
 * and R is just adopted (the flag is cleared).
 *
 * Step 0 - lost uploads.  If sent_sha is set, R holds exactly sent_sha (at
 * sent_path, when that is known) and R is not simply B, R is our own
 * write whose answer was lost: B := R (adopted_sent) before anything else,
 * so it is neither a conflict nor sent twice.  With sent_path, a lost
 * rename (R.sha == B.sha, R.path == sent_path != B.path) is adopted too, so
 * a second local rename on top of it is an update, not a conflict;
 * without it, a rename-only upload converges by the rule "L == R" below.
 *
 * Decision table (RO = read-only store; "refused" = L's sha, at its path
 * if refused_path is set, was refused by the server before):
 *
 *  local | B   | R                     | condition                 | action
 *  ------+-----+-----------------------+---------------------------+------------------
 *  none  | any | absent                |                           | FORGET
 *  none  | any | present               | (node missing: nothing    | PULL
 *        |     |                       |  local to lose)           |
 *  T     | any | absent                | both gone                 | FORGET
 *  T     | no  | present (other memory)| not our lost create       | PULL (new to us)
 *  T     | yes | R != B (content/path) | remote changed            | RESTORE  warn
 *  T     | yes | R == B                | RO (any mode)             | KEEP_REMOTE warn
 *  T     | yes | R == B                | enabled                   | DELETE expect R.sha, capped
 *  T     | yes | R == B                | log_only                  | LOG_DELETE info, capped
 *  T     | yes | R == B                | disabled                  | HOLD_DELETE debug
 *  file  | no  | absent                | RO                        | KEEP_UNSYNCED warn
 *  file  | no  | absent                | refused                   | SKIP_REFUSED
 *  file  | no  | absent                | RW                        | CREATE
 *  file  | yes | absent                | L == B (content and path) | REMOVE_LOCAL info
 *  file  | yes | absent                | L != B, RO                | KEEP_UNSYNCED warn, forget B
 *  file  | yes | absent                | L != B, refused           | SKIP_REFUSED, forget B
 *  file  | yes | absent                | L != B, RW                | RECREATE info
 *  file  | no  | present (at its path) | L == R (content and path) | ADOPT (B := R)
 *  file  | no  | present (at its path) | otherwise                 | CONFLICT_PULL warn
 *  file  | yes | present               | three-way, per attribute (content, path):
 *        |     |                       |   same: L == R; local: R == B; remote: L == B;
 *        |     |                       |   both: all three differ
 *        |     |                       | any "both", or local+remote | CONFLICT_PULL warn
 *        |     |                       | only remote changes       | PULL
 *        |     |                       | only local changes, RO    | KEEP_UNSYNCED warn
 *        |     |                       | only local, L's path held | CONFLICT_PULL warn
 *        |     |                       |  by another memory that   |  (REC_MSG_PATH_HELD)
 *        |     |                       |  stays (path_held)        |
 *        |     |                       | only local, refused       | SKIP_REFUSED
 *        |     |                       | only local changes, RW    | UPDATE expect R.sha
 *        |     |                       | all same, B != R or dirty | ADOPT (B := R)
 *        |     |                       | all same, B == R, clean   | NOTHING
 *
 * The store wins every conflict: there is no attribute-level merge (a local
 * rename against a remote edit is a conflict too; so is a rename onto a
 * path the store gave another memory that nothing local moves away, as in
 * `rm a; mv b a` against another client's edit of a: that rename would be
 * refused, 409, at every sync).  CONFLICT_PULL keeps L's
 * content as a conflict record when it differs from R and from B; a lost
 * rename alone has no content to keep.  Read-only stores never get CREATE,
 * UPDATE, DELETE or RECREATE.  Differences from the SDK worker (D.5-D.8),
 * each on the side of losing nothing:
 *  - renames are path updates of the same memory id, not create + delete;
 *  - a tombstone is an explicit unlink through the mount, so the delete
 *    goes out at the next sync with no 30 s corroboration wait;
 *  - a tombstone of a read-only store is dropped and the server's copy
 *    shows again (KEEP_REMOTE); under log_only and disabled the file stays
 *    gone for the session (LOG_DELETE, HOLD_DELETE) and the memory is never
 *    deleted, by this or any later process (rec_deletion_mode: a
 *    tombstone's recorded mode binds whoever syncs it);
 *  - a lost upload followed by another local edit becomes an UPDATE on top
 *    of the adopted version, not a conflict;
 *  - a retried update that meets a 409 precondition after an attempt whose
 *    answer was lost is not a conflict (rec_classify: RETRY; the listing
 *    adopts it by sent_sha).
 *
 * Engine obligations (not checkable here): apply PULL, CONFLICT_PULL,
 * RESTORE and REMOVE_LOCAL only if the node still has the sha the decision
 * saw (else leave it to the next sync); count DELETE and LOG_DELETE against
 * rec_delete_cap and hold the rest (REC_MSG_DELETE_CAP); log "standing"
 * messages once per (path, sha). */
#include "reconcile.h"

#include <errno.h>
#include <string.h>

static bool has(const char *s)
{
    return s && *s;
}

/* Equal strings; two absent strings are equal, absent != present. */
static bool same(const char *a, const char *b)
{
    if (!has(a) || !has(b))
        return !has(a) && !has(b);
    return strcmp(a, b) == 0;
}

/* Which side changed one attribute since the baseline. */
enum side { SIDE_SAME, SIDE_LOCAL, SIDE_REMOTE, SIDE_BOTH };

static enum side merge3(const char *base, const char *loc, const char *rem)
{
    if (same(loc, rem))
        return SIDE_SAME;
    if (same(rem, base))
        return SIDE_LOCAL;
    if (same(loc, base))
        return SIDE_REMOTE;
    return SIDE_BOTH;
}

static void say(struct rec_out *o, enum rec_action a, enum log_level lvl, const char *msg)
{
    o->action = a;
    o->level = lvl;
    o->msg = msg;
}

/* The refusal applies to this exact content (and path, when recorded). */
static bool is_refused(const struct rec_in *in, const char *lsha)
{
    if (!has(in->refused_sha) || !same(in->refused_sha, lsha))
        return false;
    return !has(in->refused_path) || same(in->refused_path, in->path);
}

/* Tombstone: R present. */
static void decide_tombstone(const struct rec_in *in, bool has_base, struct rec_out *o)
{
    if (!has_base) {
        /* A never-synced file was deleted; the memory at its path is
         * someone else's, new to us. */
        say(o, REC_PULL, LOG_LVL_DEBUG, NULL);
        o->need_content = true;
        return;
    }
    if (!same(in->remote_sha, o->base_sha) || !same(in->remote_path, o->base_path)) {
        say(o, REC_RESTORE, LOG_LVL_WARN, REC_MSG_RESTORE);
        o->need_content = true;
        return;
    }
    if (in->access == REC_READ_ONLY) {
        say(o, REC_KEEP_REMOTE, LOG_LVL_WARN, REC_MSG_RO_DELETE);
        o->need_content = true;
        return;
    }
    switch (in->deletions) {
    case REC_DEL_ENABLED:
        say(o, REC_DELETE, LOG_LVL_DEBUG, NULL);
        o->expect_sha = in->remote_sha;
        o->counts_cap = true;
        break;
    case REC_DEL_LOG_ONLY:
        say(o, REC_LOG_DELETE, LOG_LVL_INFO, REC_MSG_LOG_ONLY);
        o->expect_sha = in->remote_sha;
        o->counts_cap = true;
        o->standing = true;
        break;
    case REC_DEL_DISABLED:
    default:
        say(o, REC_HOLD_DELETE, LOG_LVL_DEBUG, REC_MSG_DEL_DISABLED);
        o->standing = true;
        break;
    }
}

/* Live file, R absent. */
static void decide_remote_gone(const struct rec_in *in, bool has_base, const char *lsha,
                               struct rec_out *o)
{
    bool ro = in->access == REC_READ_ONLY;

    if (!has_base) {
        if (ro) {
            say(o, REC_KEEP_UNSYNCED, LOG_LVL_WARN, REC_MSG_RO_NEW);
            o->standing = true;
        } else if (is_refused(in, lsha)) {
            say(o, REC_SKIP_REFUSED, LOG_LVL_DEBUG, REC_MSG_SKIP_REFUSED);
            o->standing = true;
        } else {
            say(o, REC_CREATE, LOG_LVL_DEBUG, NULL);
        }
        return;
    }
    if (same(lsha, o->base_sha) && same(in->path, o->base_path)) {
        say(o, REC_REMOVE_LOCAL, LOG_LVL_INFO, REC_MSG_REMOVE_LOCAL);
        return;
    }
    if (ro) {
        say(o, REC_KEEP_UNSYNCED, LOG_LVL_WARN, REC_MSG_RO_REMOTE_DELETED);
        o->forget_base = true;
    } else if (is_refused(in, lsha)) {
        say(o, REC_SKIP_REFUSED, LOG_LVL_DEBUG, REC_MSG_SKIP_REFUSED);
        o->forget_base = true;
        o->standing = true;
    } else {
        say(o, REC_RECREATE, LOG_LVL_INFO, REC_MSG_RECREATE);
    }
}

/* Live file, R present, with a baseline: the three-way merge. */
static void decide_three_way(const struct rec_in *in, const char *lsha, struct rec_out *o)
{
    enum side c = merge3(o->base_sha, lsha, in->remote_sha);
    enum side p = merge3(o->base_path, in->path, in->remote_path);
    bool loc = c == SIDE_LOCAL || c == SIDE_BOTH || p == SIDE_LOCAL || p == SIDE_BOTH;
    bool rem = c == SIDE_REMOTE || c == SIDE_BOTH || p == SIDE_REMOTE || p == SIDE_BOTH;

    if (loc && rem) {
        say(o, REC_CONFLICT_PULL, LOG_LVL_WARN, REC_MSG_BOTH_CHANGED);
        o->keep_local = c == SIDE_LOCAL || c == SIDE_BOTH;
        o->need_content = !same(lsha, in->remote_sha);
    } else if (rem) {
        say(o, REC_PULL, LOG_LVL_DEBUG, NULL);
        o->need_content = c == SIDE_REMOTE;
    } else if (loc) {
        if (in->access == REC_READ_ONLY) {
            say(o, REC_KEEP_UNSYNCED, LOG_LVL_WARN, REC_MSG_RO_EDIT);
            o->standing = true;
        } else if (p == SIDE_LOCAL && in->path_held) {
            /* The path is the store's: the move loses, the file goes back
             * to its baseline, its changed content kept as a record. */
            say(o, REC_CONFLICT_PULL, LOG_LVL_WARN, REC_MSG_PATH_HELD);
            o->keep_local = c == SIDE_LOCAL;
            o->need_content = !same(lsha, in->remote_sha);
        } else if (is_refused(in, lsha)) {
            say(o, REC_SKIP_REFUSED, LOG_LVL_DEBUG, REC_MSG_SKIP_REFUSED);
            o->standing = true;
        } else {
            say(o, REC_UPDATE, LOG_LVL_DEBUG, NULL);
            o->expect_sha = in->remote_sha;
            o->send_content = c == SIDE_LOCAL;
            o->send_path = p == SIDE_LOCAL;
        }
    } else if (o->adopted_sent || in->dirty || !same(o->base_sha, in->remote_sha) ||
               !same(o->base_path, in->remote_path)) {
        say(o, REC_ADOPT, LOG_LVL_DEBUG, NULL);
    } else {
        say(o, REC_NOTHING, LOG_LVL_DEBUG, NULL);
    }
}

int rec_decide(const struct rec_in *in, struct rec_out *out)
{
    if (!out)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    say(out, REC_NOTHING, LOG_LVL_DEBUG, NULL);
    if (!in)
        return -EINVAL;

    bool has_base = has(in->memory_id);
    if (in->local == REC_L_FILE && (!has(in->path) || (!has_base && !has(in->sha))))
        return -EINVAL;
    if (in->remote && (!has(in->remote_id) || !has(in->remote_sha) || !has(in->remote_path)))
        return -EINVAL;

    out->base_id = in->memory_id;
    out->base_sha = in->base_sha;
    out->base_path = in->base_path;
    /* Step 0: R holds our own lost upload. */
    bool at_sent = !has(in->sent_path) || same(in->remote_path, in->sent_path);
    bool is_base = has_base && same(in->remote_sha, in->base_sha) &&
                   (!has(in->sent_path) || same(in->remote_path, in->base_path));
    if (in->remote && has(in->sent_sha) && same(in->remote_sha, in->sent_sha) && at_sent &&
        !is_base) {
        out->base_id = in->remote_id;
        out->base_sha = in->remote_sha;
        out->base_path = in->remote_path;
        out->adopted_sent = true;
        has_base = true;
    }
    /* A file whose bytes were never changed locally may carry no hash. */
    const char *lsha = has(in->sha) ? in->sha : out->base_sha;

    switch (in->local) {
    case REC_L_NONE:
        if (in->remote) {
            say(out, REC_PULL, LOG_LVL_DEBUG, NULL);
            out->need_content = true;
        } else {
            say(out, REC_FORGET, LOG_LVL_DEBUG, NULL);
        }
        break;
    case REC_L_DELETED:
        if (in->remote)
            decide_tombstone(in, has_base, out);
        else
            say(out, REC_FORGET, LOG_LVL_DEBUG, NULL);
        break;
    case REC_L_FILE:
        if (!in->remote) {
            decide_remote_gone(in, has_base, lsha, out);
        } else if (!has_base) {
            /* A never-synced file meets a memory at its path: against an
             * empty baseline both sides "changed", so equal bytes converge
             * (ADOPT) and anything else is a conflict the store wins. */
            decide_three_way(in, lsha, out);
            out->base_id = in->remote_id;
            out->base_sha = in->remote_sha;
            out->base_path = in->remote_path;
        } else {
            decide_three_way(in, lsha, out);
        }
        break;
    default:
        return -EINVAL;
    }
    if (out->adopted_sent && !out->msg) {
        out->level = LOG_LVL_DEBUG;
        out->msg = REC_MSG_ADOPT_SENT;
    }
    return 0;
}

enum rec_deletions rec_deletion_mode(enum rec_deletions recorded, enum rec_deletions now)
{
    /* enabled < log_only < disabled in strictness. */
    return recorded > now ? recorded : now;
}

size_t rec_delete_cap(size_t memories)
{
    size_t cap = memories / 4;

    if (cap > 50)
        cap = 50;
    return cap < 8 ? 8 : cap;
}

static void result(struct rec_result *r, enum rec_followup fu, enum log_level lvl,
                   const char *msg, bool keep_sent)
{
    r->fu = fu;
    r->level = lvl;
    r->msg = msg;
    r->keep_sent = keep_sent;
}

/* The server refused the request itself: retrying the same bytes cannot
 * help (400, 413, content that is not UTF-8). */
static bool is_refusal(int err)
{
    return err == -EINVAL || err == -EFBIG || err == -EILSEQ;
}

static void classify_upload(const struct rec_write *w, struct rec_result *r)
{
    bool create = w->action != REC_UPDATE;
    bool earlier = w->attempts > 1; /* an earlier attempt's answer was lost */

    if (w->err == 0) {
        result(r, REC_FU_DONE, LOG_LVL_DEBUG, NULL, false);
    } else if (is_refusal(w->err)) {
        result(r, REC_FU_REFUSED, LOG_LVL_WARN, REC_MSG_REFUSED, false);
    } else if (w->err == -EEXIST) {
        /* Our own earlier create holds the path with our bytes. */
        if (create && earlier && has(w->conflict_sha) && same(w->conflict_path, w->path) &&
            same(w->conflict_sha, w->sha))
            result(r, REC_FU_ADOPT, LOG_LVL_DEBUG, REC_MSG_ADOPT_SENT, false);
        else
            result(r, REC_FU_RETRY, LOG_LVL_WARN, REC_MSG_PATH_CONFLICT, earlier);
    } else if (!create && w->err == -ENOENT) {
        result(r, REC_FU_RECREATE, LOG_LVL_INFO, REC_MSG_RECREATE, false);
    } else if (!create && w->err == -ESTALE) {
        if (earlier) /* likely our own first attempt: the listing settles it */
            result(r, REC_FU_RETRY, LOG_LVL_DEBUG, REC_MSG_ADOPT_SENT, true);
        else
            result(r, REC_FU_STORE_WINS, LOG_LVL_WARN, REC_MSG_UPLOAD_LOST_RACE, false);
    } else if (w->err == -ECANCELED) {
        /* Ended by the daemon (an unmount's sync takes the store, or its
         * flush timeout passed, which says so itself): no failure of the
         * upload's; as below otherwise. */
        result(r, REC_FU_RETRY, LOG_LVL_DEBUG, REC_MSG_UPLOAD_FAILED, w->attempts > 0);
    } else {
        /* Transport, 429, 5xx, auth, a malformed 2xx, a 409 of another
         * kind: the file stays dirty; a request that went out may have
         * applied, so its hash is kept for the next listing. */
        result(r, REC_FU_RETRY, LOG_LVL_WARN, REC_MSG_UPLOAD_FAILED, w->attempts > 0);
    }
}

void rec_classify(const struct rec_write *w, struct rec_result *out)
{
    if (!out)
        return;
    result(out, REC_FU_INVALID, LOG_LVL_ERROR, NULL, false);
    if (!w)
        return;
    switch (w->action) {
    case REC_CREATE:
    case REC_RECREATE:
    case REC_UPDATE:
        classify_upload(w, out);
        break;
    case REC_DELETE:
        if (w->err == 0 || w->err == -ENOENT)
            result(out, w->err ? REC_FU_GONE : REC_FU_DONE, LOG_LVL_INFO, REC_MSG_DELETED, false);
        else if (w->err == -ESTALE)
            result(out, REC_FU_STORE_WINS, LOG_LVL_WARN, REC_MSG_DELETE_LOST_RACE, false);
        else
            result(out, REC_FU_RETRY, LOG_LVL_WARN, REC_MSG_DELETE_FAILED, false);
        break;
    default:
        break;
    }
}

bool rec_action_writes(enum rec_action a)
{
    return a == REC_CREATE || a == REC_UPDATE || a == REC_DELETE || a == REC_RECREATE;
}

const char *rec_action_name(enum rec_action a)
{
    static const char *const names[] = {
        [REC_NOTHING] = "nothing",         [REC_PULL] = "pull",
        [REC_ADOPT] = "adopt",             [REC_CREATE] = "create",
        [REC_UPDATE] = "update",           [REC_DELETE] = "delete",
        [REC_LOG_DELETE] = "log_delete",   [REC_KEEP_REMOTE] = "keep_remote",
        [REC_CONFLICT_PULL] = "conflict_pull", [REC_RESTORE] = "restore",
        [REC_RECREATE] = "recreate",       [REC_KEEP_UNSYNCED] = "keep_unsynced",
        [REC_REMOVE_LOCAL] = "remove_local", [REC_FORGET] = "forget",
        [REC_SKIP_REFUSED] = "skip_refused", [REC_HOLD_DELETE] = "hold_delete",
    };
    if ((unsigned)a >= sizeof(names) / sizeof(names[0]) || !names[a])
        return "?";
    return names[a];
}

const char *rec_followup_name(enum rec_followup f)
{
    static const char *const names[] = {
        [REC_FU_DONE] = "done",           [REC_FU_ADOPT] = "adopt",
        [REC_FU_GONE] = "gone",           [REC_FU_STORE_WINS] = "store_wins",
        [REC_FU_RECREATE] = "recreate",   [REC_FU_REFUSED] = "refused",
        [REC_FU_RETRY] = "retry",         [REC_FU_INVALID] = "invalid",
    };
    if ((unsigned)f >= sizeof(names) / sizeof(names[0]) || !names[f])
        return "?";
    return names[f];
}
