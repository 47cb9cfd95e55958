/* plan.c - steps 2 and 3 of a sync (cycle.c): every tombstone and every
 * dirty file is decided with rec_decide against the listing, and what the
 * decision asks is either done locally at once (adopt, let the store win,
 * remove, forget) or planned as a write for push.c.
 *
 * What the decisions are fed, beyond the cache and the listing:
 *  - the uploads still unsettled (cache/sent.c): the one whose bytes the
 *    store shows now is ours (a lost answer), found by memory id, or for a
 *    file never synced by the node it was sent for (which follows atomic
 *    saves), also at the path it was sent to when the file moved since;
 *  - the deletion mode of a tombstone: the stricter of the mode it was
 *    made under and this process's (rec_deletion_mode);
 *  - a file never synced at the path of a memory it deleted (rm f; a new f)
 *    takes that memory over: one update, not a delete racing a create.
 * Every local change made here is conditional on the node still holding
 * what the decision saw (cache_*_if); a write that landed since is decided
 * again at the next sync.  Runs under the store's cycle_lock. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cycle_int.h"
#include "log.h"
#include "rules.h"

static struct job *plan_add(struct plan *p)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        struct job *v = realloc(p->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        p->v = v;
        p->cap = cap;
    }
    struct job *j = &p->v[p->n++];
    memset(j, 0, sizeof(*j));
    return j;
}

void plan_free(struct plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->v[i].path);
        free(p->v[i].where);
        free(p->v[i].content);
    }
    free(p->v);
}

static void say(struct sstore *st, const struct rec_out *o, const char *path, const char *sha)
{
    if (!o->msg || (o->standing && !cycle_first_time(st, o->msg, path, sha)))
        return;
    log_event(o->level, o->msg, "memory_store_id", st->id, "path", path, NULL);
}

/* The unsettled upload of memory id (or, with id "", of node ino) whose
 * bytes R holds, at R's path if one was sent there: the store has our
 * write, whatever became of its answer. */
static const struct cache_sent *sent_match(const struct sents *sv, const char *id, uint64_t ino,
                                           const struct cache_remote *rm)
{
    const struct cache_sent *best = NULL;
    for (size_t i = 0; rm && i < sv->n; i++) {
        const struct cache_sent *x = &sv->v[i];
        bool mine = id[0] ? strcmp(x->memory_id, id) == 0
                          : (!x->memory_id[0] && x->ino == ino);
        if (!mine || strcmp(x->sha, rm->sha) != 0)
            continue;
        if (strcmp(x->path, rm->path) == 0)
            return x;
        best = best ? best : x;
    }
    return best;
}

/* Forgets every unsettled upload that a decision just settled. */
static void sent_settled(struct cycle *cy, const struct cache_sent *x)
{
    if (x)
        cache_sent_drop(cy->s->c, x->id);
}

/* A file never synced at the path of a memory deleted locally (rm f; then
 * a new f) takes that memory over: the pair is one update of the memory,
 * as an overwrite would be, not a delete racing a create at the same path
 * (which met the memory still there and threw the new file away as a
 * conflict).  Whatever the deletion mode: an update deletes nothing, and
 * under log_only or disabled the memory stays at the path, where a new
 * file not taking it over would meet it and be thrown away.  Only a
 * memory still at that path, or gone from the store (plan_file then drops
 * the tombstone): one moved remotely is restored where it went
 * (plan_tombstones), and the path is the new file's.  Whether tombstone t
 * can be taken over by a file at its path. */
static bool takeable(const struct remote *r, const struct cache_tombstone *t)
{
    const struct cache_remote *m = remote_find_id(r, t->memory_id);
    return t->base_path && (!m || strcmp(m->path, t->base_path) == 0);
}

/* The tombstone a file never synced takes over, or NULL. */
static const struct cache_tombstone *taken_over(const struct remote *r, const struct tombs *t,
                                                const struct cnode *n)
{
    if (n->memory_id[0])
        return NULL;
    for (size_t i = 0; i < t->n; i++)
        if (takeable(r, &t->v[i]) && strcmp(t->v[i].base_path, n->path) == 0)
            return &t->v[i];
    return NULL;
}

static bool new_file_at(const struct files *f, const char *path)
{
    for (size_t i = 0; i < f->n; i++)
        if (!f->v[i].n.memory_id[0] && strcmp(f->v[i].n.path, path) == 0)
            return true;
    return false;
}

/* Whether a file never synced at tombstone t's path takes its memory
 * over: one to push now, or (but at the final sync, after which a file
 * not finished is not pushed) one a writer has not finished yet, which
 * takes it once saved (a deletion sent meanwhile ended the memory's
 * history for a new one). */
static bool tomb_taken(const struct cycle *cy, const struct cache_tombstone *t)
{
    return takeable(&cy->r, t) &&
           (new_file_at(&cy->files, t->base_path) ||
            (!cy->final && new_file_at(&cy->waiting, t->base_path)));
}

/* A file of f other than ino has memory id and may move it: not one this
 * sync decides not to move (hold_back_moves). */
static bool holds(const struct files *f, const char *id, uint64_t ino)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].n.ino != ino && !f->v[i].stays && f->v[i].n.memory_id[0] &&
            strcmp(f->v[i].n.memory_id, id) == 0)
            return true;
    return false;
}

/* Another local file (renamed away from its baseline path) holds memory
 * id: one to push, or one a writer still holds open, whose rename waits
 * for it. */
static bool owned_elsewhere(const struct cycle *cy, const char *id, uint64_t ino)
{
    return holds(&cy->files, id, ino) || holds(&cy->waiting, id, ino);
}

/* Memory R holds the bytes of a create whose answer was lost, sent for
 * another live file never synced (since moved: an editor's backup by
 * rename, then a new file at the path): that file takes R (remote_of_new),
 * so R is not the memory of a new file at R's path. */
static bool lost_upload_of_other(const struct sents *sv, const struct cache_remote *rm,
                                 uint64_t ino)
{
    for (size_t i = 0; rm && i < sv->n; i++) {
        const struct cache_sent *x = &sv->v[i];
        if (!x->memory_id[0] && x->ino != ino && x->node_live && !x->node_id[0] &&
            strcmp(x->sha, rm->sha) == 0 && strcmp(x->path, rm->path) == 0)
            return true;
    }
    return false;
}

/* The dirty file renamed away from the remote path of memory id, if any. */
static const struct cnode *renamed_with(const struct files *f, const struct remote *r,
                                        const char *id)
{
    const struct cache_remote *m = remote_find_id(r, id);
    for (size_t i = 0; m && i < f->n; i++)
        if (!f->v[i].stays && strcmp(f->v[i].n.memory_id, id) == 0 &&
            strcmp(f->v[i].n.path, m->path) != 0)
            return &f->v[i].n;
    return NULL;
}

/* Whether memory X (listed at the path of the file ino) may leave that
 * path by something of this mount's: a local file that has X and moves it
 * (now, or once a writer finishes), a deletion of X (not one this sync
 * dropped, the store having changed X; one that log_only or disabled
 * never sends counts too: those modes leave the local tree as the user
 * made it for the session, and the move waits), or a create of another
 * file whose answer was lost (the sync settles it: the file takes X, or X
 * is deleted). */
static bool leaves(const struct cycle *cy, const struct cache_remote *x, uint64_t ino)
{
    if (owned_elsewhere(cy, x->memory_id, ino))
        return true;
    for (size_t i = 0; i < cy->tombs.n; i++)
        if (!cy->tombs.dropped[i] && strcmp(cy->tombs.v[i].memory_id, x->memory_id) == 0)
            return true;
    for (size_t i = 0; i < cy->sent.n; i++) {
        const struct cache_sent *u = &cy->sent.v[i];
        if (!u->memory_id[0] && u->ino != ino && strcmp(u->sha, x->sha) == 0 &&
            strcmp(u->path, x->path) == 0)
            return true;
    }
    return false;
}

/* Whether synced file f was moved onto a path the store gives another
 * memory that stays there whatever this mount sends (leaves): its move
 * would be refused (409) at every sync: `rm a; mv b a` against another
 * client's edit of a, a move onto a path another client created, a swap
 * one of whose memories another client changed. */
static bool move_held(const struct cycle *cy, const struct file *f)
{
    const struct cnode *n = &f->n;
    const struct cache_remote *at = remote_find_path(&cy->r, n->path);
    return at && strcmp(at->memory_id, n->memory_id) != 0 && !leaves(cy, at, n->ino);
}

/* The decision for dirty file f against baseline (base_id, base_sha,
 * base_path), remote rm and unsettled upload sent: the one place a file's
 * decision input is built, for plan_file and for hold_back_moves (which
 * must foresee plan_file's decision). */
static void decide_file(const struct cycle *cy, const struct file *f, const char *base_id,
                        const char *base_sha, const char *base_path,
                        const struct cache_remote *rm, const struct cache_sent *sent, bool held,
                        struct rec_out *o)
{
    const struct cnode *n = &f->n;
    struct rec_in in = {
        .memory_id = base_id, .base_sha = base_sha, .base_path = base_path,
        .local = REC_L_FILE, .sha = n->sha, .path = n->path, .dirty = true,
        .refused_sha = f->refused_sha, .sent_sha = sent ? sent->sha : NULL,
        .sent_path = sent ? sent->path : NULL,
        .remote = rm != NULL, .remote_id = rm ? rm->memory_id : NULL,
        .remote_sha = rm ? rm->sha : NULL, .remote_path = rm ? rm->path : NULL,
        .path_held = held,
        .access = cy->st->read_only ? REC_READ_ONLY : REC_READ_WRITE,
        .deletions = cycle_mode(cy->s),
    };
    rec_decide(&in, o);
}

/* Whether synced file f, its memory listed, goes to where the store has
 * its memory this sync (it loses to the store, its move held back or not,
 * or only the store changed it): the decision plan_file takes (it adds
 * only what files never synced need).  A file whose move waits (refused
 * content, a read-only store) still moves its memory, later. */
static bool goes_back(const struct cycle *cy, const struct file *f, bool held)
{
    const struct cnode *n = &f->n;
    const struct cache_remote *rm = remote_find_id(&cy->r, n->memory_id);
    struct rec_out o;
    decide_file(cy, f, n->memory_id, n->base_sha, n->base_path, rm,
                sent_match(&cy->sent, n->memory_id, n->ino, rm), held, &o);
    return o.action == REC_CONFLICT_PULL || o.action == REC_PULL;
}

/* Before the files are decided: which synced files go back to where the
 * store has their memory this sync (they lose to it, or their move is
 * held back).  One that does leaves its memory at that path, which may
 * hold back the file moved onto it in turn (mv b x; mv a b with x held; a
 * swap one of whose memories changed remotely): repeated until nothing
 * changes, at most once per file. */
static void hold_back_moves(struct cycle *cy)
{
    /* Only against the store as read now: the next slice of a backlog
     * decides against the cache's baselines and what earlier reads could
     * not place, and a move taken back locally has no precondition to
     * stop it (a sent one does). */
    if (!cy->read)
        return;
    for (bool more = true; more;) {
        more = false;
        for (size_t i = 0; i < cy->files.n; i++) {
            struct file *f = &cy->files.v[i];
            if (f->stays || !f->n.memory_id[0] || !remote_find_id(&cy->r, f->n.memory_id))
                continue; /* never synced, or its memory gone: decided as new */
            f->path_held = move_held(cy, f);
            if (goes_back(cy, f, f->path_held))
                f->stays = more = true;
        }
    }
}

/* Renames that form a cycle (mv a t; mv b a; mv t b) can never be sent as
 * renames: each target path is held by the next memory of the cycle, which
 * waits for its own target.  For a file n renamed onto the path of memory
 * X, where following "the file that took X's path, the memory listed at
 * that file's new path, ..." comes back to n's own memory, this returns X:
 * n's content then goes to X, which already sits at n's path, and n takes
 * X's identity; every member does the same, so the server ends with the
 * local paths and contents, without a temporary path.  A chain that ends
 * on a free path returns NULL: the renames go out in order. */
/* Whether the store holds g's memory as g's baseline: nobody else
 * changed it since this mount last synced it. */
static bool remote_unchanged(const struct remote *r, const struct cnode *g)
{
    const struct cache_remote *m = remote_find_id(r, g->memory_id);
    return m && m->sha && m->path && strcmp(m->sha, g->base_sha) == 0 &&
           strcmp(m->path, g->base_path) == 0;
}

/* Only a cycle whose every memory is as this mount last synced it: the
 * content sent to X has X's listed hash as precondition, which holds
 * whatever X holds, so a cycle over a remote edit would overwrite that
 * edit without a conflict.  Otherwise the renames go out as such, meet
 * the paths held, and the store wins where it changed. */
static const struct cache_remote *cycle_target(const struct remote *r, const struct files *f,
                                               const struct cnode *n)
{
    const struct cache_remote *x = remote_find_path(r, n->path);
    if (!x || !n->memory_id[0] || strcmp(x->memory_id, n->memory_id) == 0)
        return NULL;
    if (!remote_unchanged(r, n))
        return NULL;
    const char *id = x->memory_id;
    for (size_t hops = 0; hops <= f->n; hops++) {
        const struct cnode *g = renamed_with(f, r, id);
        if (!g)
            return NULL; /* X stays where it is: a real path conflict */
        if (!remote_unchanged(r, g))
            return NULL;
        const struct cache_remote *h = remote_find_path(r, g->path);
        if (!h)
            return NULL; /* a chain onto a free path */
        if (strcmp(h->memory_id, n->memory_id) == 0)
            return x;
        id = h->memory_id;
    }
    return NULL;
}

/* Step 2: tombstones. */
static int plan_tombstones(struct cycle *cy)
{
    struct sstore *st = cy->st;
    struct plan *p = &cy->plan;
    int rc = 0;
    for (size_t i = 0; i < cy->tombs.n && !rc; i++) {
        const struct cache_tombstone *t = &cy->tombs.v[i];
        if (tomb_taken(cy, t))
            continue; /* a new file at its path updates the memory (plan_file) */
        const struct cache_remote *rm = remote_find_id(&cy->r, t->memory_id);
        const struct cache_sent *sent = sent_match(&cy->sent, t->memory_id, 0, rm);
        struct rec_in in = {
            .memory_id = t->memory_id, .base_sha = t->base_sha, .base_path = t->base_path,
            .local = REC_L_DELETED, .path = t->base_path, .remote = rm != NULL,
            .remote_id = rm ? rm->memory_id : NULL, .remote_sha = rm ? rm->sha : NULL,
            .remote_path = rm ? rm->path : NULL, .sent_sha = sent ? sent->sha : NULL,
            .sent_path = sent ? sent->path : NULL,
            .access = st->read_only ? REC_READ_ONLY : REC_READ_WRITE,
            .deletions = rec_deletion_mode((enum rec_deletions)t->mode, cycle_mode(cy->s)),
        };
        struct rec_out o;
        rec_decide(&in, &o);
        if (o.adopted_sent) {
            /* The store holds the file's last upload: the deletion's
             * baseline from now on, whatever this sync does with it (a
             * deletion held by the cap or the mode, decided again next
             * sync without the upload's record, took that upload for a
             * remote change and brought the file back). */
            rc = cache_tombstone_rebase(cy->s->c, st->id, t->memory_id, o.base_sha, o.base_path);
            if (rc)
                break;
            sent_settled(cy, sent);
        }
        if (o.counts_cap && p->cap_deletes >= p->limit) {
            p->held++;
            continue;
        }
        switch (o.action) {
        case REC_DELETE: {
            struct job *j = plan_add(p);
            if (!j) {
                rc = -ENOMEM;
                break;
            }
            j->action = REC_DELETE;
            j->path = strdup(t->base_path ? t->base_path : "");
            snprintf(j->sha, sizeof(j->sha), "%s", o.expect_sha ? o.expect_sha : "");
            snprintf(j->memory_id, sizeof(j->memory_id), "%s", t->memory_id);
            p->cap_deletes++;
            break;
        }
        case REC_LOG_DELETE:
            p->cap_deletes++;
            p->log_deletes++;
            say(st, &o, t->base_path, t->base_sha);
            break;
        case REC_HOLD_DELETE:
            say(st, &o, t->base_path, t->base_sha);
            break;
        case REC_NOTHING:
            break;
        default:
            /* Keep remote, restore, forget: the tombstone goes; the
             * listing applied in step 4 shows the server's copy again. */
            say(st, &o, t->base_path, t->base_sha);
            if (o.action == REC_RESTORE)
                cy->rep.conflicts++;
            cache_tombstone_drop(cy->s->c, st->id, t->memory_id);
            cy->tombs.dropped[i] = true;
            break;
        }
    }
    return rc;
}

/* The memory R a file never synced may be: the one at its path, or, when
 * the file moved after an upload whose answer was lost, the one at the
 * path that upload went to, if it holds the upload's bytes and no other
 * file has it.  *sent gets that upload. */
static const struct cache_remote *remote_of_new(struct cycle *cy, const struct cnode *n,
                                                const struct cache_sent **sent)
{
    const struct cache_remote *rm = remote_find_path(&cy->r, n->path);
    *sent = sent_match(&cy->sent, "", n->ino, rm);
    if (rm)
        return rm;
    for (size_t i = 0; i < cy->sent.n; i++) {
        const struct cache_sent *x = &cy->sent.v[i];
        if (x->memory_id[0] || x->ino != n->ino || strcmp(x->path, n->path) == 0)
            continue;
        const struct cache_remote *at = remote_find_path(&cy->r, x->path);
        if (at && strcmp(at->sha, x->sha) == 0 &&
            !owned_elsewhere(cy, at->memory_id, n->ino) &&
            !cache_memory_known(cy->s->c, cy->st->id, at->memory_id)) {
            *sent = x;
            return at;
        }
    }
    return NULL;
}

/* Whether node ino is a live file. */
static bool live(struct cycle *cy, uint64_t ino)
{
    struct cnode x;
    if (!ino || cache_getattr(cy->s->c, ino, &x) != 0)
        return false;
    bool yes = !x.unlinked && x.parent && !x.is_dir;
    cnode_clear(&x);
    return yes;
}

/* The store holds the lost upload sent for n, which is not a live file
 * any more since this sync read it (the decision adopted that upload). */
static int adopted_by_gone(struct cycle *cy, const struct cnode *n,
                           const struct cache_sent *sent, const struct rec_out *o)
{
    struct syncer *s = cy->s;
    struct sstore *st = cy->st;
    if (!sent)
        return 0;
    /* Replaced by an atomic save: the record went with the memory to the
     * file that took it, which the next sync decides with it. */
    uint64_t owner = cache_sent_owner(s->c, sent->id);
    if (owner != n->ino && live(cy, owner))
        return 0;
    /* Removed.  An update's file left a deletion, whose baseline is the
     * upload now (as plan_tombstones does); a create's memory belongs to
     * no file and is recorded as deleted before this sync's apply would
     * bring it into the mount. */
    int rc = 0;
    if (sent->memory_id[0]) {
        rc = cache_tombstone_rebase(s->c, st->id, o->base_id, o->base_sha, o->base_path);
    } else if (!cache_memory_known(s->c, st->id, o->base_id)) {
        log_info("an upload whose answer was lost reached the store after its file was "
                 "removed; recording it as deleted", "memory_store_id", st->id, "path", n->path,
                 "memory_id", o->base_id);
        rc = cache_orphan(s->c, st->id, o->base_id, o->base_sha, o->base_path);
    }
    if (rc == -ENOENT)
        rc = 0;
    if (!rc)
        sent_settled(cy, sent);
    return rc;
}

/* Step 3 for one dirty file. */
static int plan_file(struct cycle *cy, struct file *f)
{
    struct sstore *st = cy->st;
    struct syncer *s = cy->s;
    const struct cnode *n = &f->n;
    const struct cache_tombstone *tk = taken_over(&cy->r, &cy->tombs, n);
    if (tk && !remote_find_id(&cy->r, tk->memory_id)) {
        /* The memory it would take over is gone from the store: nothing is
         * left to take over or to delete.  The tombstone goes now and the
         * file is one never synced (kept, the tombstone's baseline would
         * stand in listings built from the feed, beside the memory the
         * file's create makes if its answer is lost). */
        int rc = cache_tombstone_drop(s->c, st->id, tk->memory_id);
        if (rc)
            return rc;
        tk = NULL;
    }
    const char *base_id = tk ? tk->memory_id : n->memory_id;
    const struct cache_sent *sent = NULL;
    const struct cache_remote *rm;
    bool base_gone = false;
    if (base_id[0]) {
        rm = remote_find_id(&cy->r, base_id);
        sent = sent_match(&cy->sent, base_id, n->ino, rm);
        const struct cache_remote *at = rm || tk || !n->sha[0] ? NULL
                                                               : remote_find_path(&cy->r, n->path);
        if (at && !owned_elsewhere(cy, at->memory_id, n->ino)) {
            /* The file's memory is gone from the store and another holds
             * its path (removed and written anew by another client): the
             * path changed on both sides, decided as for a file never
             * synced that meets a memory at its path (the store wins, or
             * equal bytes converge).  Creating the path again would be
             * refused (409) at every sync. */
            base_id = "";
            base_gone = true;
            rm = at;
            sent = sent_match(&cy->sent, "", n->ino, rm);
        }
    } else {
        rm = remote_of_new(cy, n, &sent);
    }
    /* A memory listed at the path of a new file but renamed away locally
     * frees the path: the rename goes out first (push.c), then the create.
     * Not a conflict. */
    if (rm && !base_id[0] &&
        (owned_elsewhere(cy, rm->memory_id, n->ino) ||
         (!sent && lost_upload_of_other(&cy->sent, rm, n->ino))))
        rm = NULL, sent = NULL;
    struct rec_out o;
    decide_file(cy, f, base_id, base_gone ? "" : tk ? tk->base_sha : n->base_sha,
                base_gone ? "" : tk ? tk->base_path : n->base_path, rm, sent,
                f->path_held && strcmp(base_id, n->memory_id) == 0, &o);
    say(st, &o, n->path, n->sha);
    int rc = 0;
    if (o.adopted_sent) {
        /* The store holds our upload: it is the file's baseline from now
         * on, whatever else this sync decides. */
        rc = cache_mark_synced(s->c, n->ino, o.base_id, o.base_sha, o.base_path);
        if (rc == -ENOENT)
            return adopted_by_gone(cy, n, sent, &o);
        if (rc)
            return rc;
        sent_settled(cy, sent);
        /* Later files of this sync see the memory owned (owned_elsewhere),
         * at the adopted version (a rename cycle through this file checks
         * its memory against that baseline, remote_unchanged). */
        snprintf(f->n.memory_id, sizeof(f->n.memory_id), "%s", o.base_id);
        char *bp = strdup(o.base_path ? o.base_path : "");
        if (!bp)
            return -ENOMEM;
        snprintf(f->n.base_sha, sizeof(f->n.base_sha), "%s", o.base_sha ? o.base_sha : "");
        free(f->n.base_path);
        f->n.base_path = bp;
    }
    switch (o.action) {
    case REC_CREATE:
    case REC_RECREATE:
    case REC_UPDATE: {
        bool update = o.action == REC_UPDATE;
        /* A backlog goes out a slice per round, store after store.  Only
         * writes nothing else waits on are left for later: new content at a
         * path no memory holds, and content changes that keep the path. */
        bool independent = (o.action == REC_CREATE && !tk &&
                            !remote_find_path(&cy->r, n->path)) ||
                           (update && !o.send_path);
        if (independent && !cy->final && cy->plan.sliced++ >= ENGINE_PUSH_SLICE) {
            cy->plan.deferred++;
            return rc;
        }
        /* A cycle of renames sends the content to the memory at the path
         * instead (see cycle_target). */
        const struct cache_remote *x = update && o.send_path ? cycle_target(&cy->r, &cy->files, n)
                                                             : NULL;
        bool send_content = !update || o.send_content || x;
        bool send_path = !update || (o.send_path && !x);
        char *buf = NULL;
        size_t len = 0;
        if (send_content) {
            rc = cache_blob_get(s->c, n->sha, &buf, &len);
            if (rc)
                return rc == -ENOENT ? 0 : rc; /* being rewritten: next sync */
            const char *why = NULL;
            if (rules_check_content(buf, len, &why) == -EILSEQ) {
                /* Not UTF-8, or a NUL byte: the API cannot take it. */
                free(buf);
                if (cycle_first_time(st, REC_MSG_REFUSED, n->path, n->sha))
                    log_warn(REC_MSG_REFUSED, "memory_store_id", st->id, "path", n->path,
                             "rejection", why);
                cy->rep.refused++;
                return cache_mark_refused(s->c, n->ino, n->sha, why);
            }
        }
        /* A memory gone from the store is no baseline any more: the file
         * is re-created as a file never synced.  Kept, it would stand in
         * the next listings built from the feed (feed_view) after the
         * feed has named the deletion, beside the memory this create
         * made if its answer is lost (two memories at one path), and the
         * file would be sent to the deleted one first.  Only while the
         * file has that memory: moved over a synced file since, it has
         * that one's, and the create is not sent (cache_sent_add). */
        bool recreate = o.action == REC_RECREATE;
        const char *had = n->memory_id[0] ? n->memory_id : NULL;
        if (recreate && (rc = cache_forget_base(s->c, n->ino, had)) != 0) {
            free(buf);
            return rc;
        }
        struct job *j = plan_add(&cy->plan);
        if (!j) {
            free(buf);
            return -ENOMEM;
        }
        j->action = o.action;
        j->ino = n->ino;
        snprintf(j->node_id, sizeof(j->node_id), "%s",
                 recreate ? "" : o.adopted_sent ? o.base_id : n->memory_id);
        j->content = buf;
        j->content_len = len;
        snprintf(j->sha, sizeof(j->sha), "%s", send_content ? n->sha : o.base_sha);
        j->path = send_path ? strdup(n->path) : NULL;
        j->where = strdup(n->path);
        if ((send_path && !j->path) || !j->where)
            return -ENOMEM;
        if (update) {
            snprintf(j->memory_id, sizeof(j->memory_id), "%s",
                     x ? x->memory_id : o.base_id ? o.base_id : "");
            snprintf(j->expect, sizeof(j->expect), "%s",
                     x ? x->sha : o.expect_sha ? o.expect_sha : "");
        }
        if (tk)
            snprintf(j->tomb_id, sizeof(j->tomb_id), "%s", tk->memory_id);
        break;
    }
    case REC_ADOPT:
        /* A file removed since this sync read it adopts nothing: the
         * deletion it took over stays, to be sent. */
        rc = cache_mark_synced(s->c, n->ino, rm->memory_id, rm->sha, rm->path);
        if (!rc && tk)
            rc = cache_tombstone_drop(s->c, st->id, tk->memory_id);
        if (rc == -ENOENT)
            rc = 0;
        break;
    case REC_NOTHING:
        /* Dirty but equal to the baseline (e.g. written back to it). */
        if (n->memory_id[0])
            rc = cache_mark_synced(s->c, n->ino, n->memory_id, n->base_sha, n->base_path);
        if (rc == -ENOENT)
            rc = 0; /* removed meanwhile: its tombstone says the rest */
        break;
    case REC_PULL:
    case REC_CONFLICT_PULL:
    case REC_RESTORE:
        if (o.keep_local) {
            rc = cache_conflict_add(s->c, st->id, n->path, n->memory_id, n->sha,
                                    rm ? rm->sha : "");
            if (rc == -EAGAIN)
                return 0; /* saved again since: the next sync decides again */
            if (rc)
                return rc;
            cy->rep.conflicts++;
        }
        if (o.base_id && *o.base_id && rm && strcmp(o.base_id, rm->memory_id) == 0 &&
            n->memory_id[0]) {
            /* Back to the baseline; step 4 brings it to the remote. */
            rc = cache_revert_if(s->c, n->ino, n->sha, n->path);
            if (!rc) {
                uint64_t *v = realloc(cy->reverted, (cy->n_reverted + 1) * sizeof(*v));
                if (v) {
                    cy->reverted = v;
                    v[cy->n_reverted++] = n->ino;
                }
            }
        } else {
            /* Another memory holds the path: the local file makes way. */
            struct cache_change gone = {0};
            rc = cache_drop_if(s->c, n->ino, n->sha, n->path, &gone.parent, &gone.name);
            if (!rc && st->n.entry_gone)
                st->n.entry_gone(st->n.arg, gone.parent, n->ino, gone.name);
            free(gone.name);
        }
        /* A writer holding the file open with the content that lost goes
         * on with its own version, not the store's. */
        if (!rc && o.keep_local && st->n.lost)
            st->n.lost(st->n.arg, n->ino, n->sha);
        if (rc == -EAGAIN)
            rc = 0; /* written meanwhile: decided again next sync */
        break;
    case REC_REMOVE_LOCAL: {
        struct cache_change gone = {0};
        rc = cache_drop_if(s->c, n->ino, n->sha, n->path, &gone.parent, &gone.name);
        if (!rc && st->n.entry_gone)
            st->n.entry_gone(st->n.arg, gone.parent, n->ino, gone.name);
        free(gone.name);
        if (rc == -EAGAIN)
            rc = 0;
        break;
    }
    case REC_KEEP_UNSYNCED:
    case REC_SKIP_REFUSED:
        if (o.forget_base)
            rc = cache_forget_base(s->c, n->ino, n->memory_id[0] ? n->memory_id : NULL);
        if (o.action == REC_SKIP_REFUSED)
            cy->rep.refused++;
        break;
    default:
        break;
    }
    return rc;
}

int plan_all(struct cycle *cy)
{
    int rc = plan_tombstones(cy);
    if (!rc)
        hold_back_moves(cy);
    for (size_t i = 0; i < cy->files.n && !rc; i++)
        rc = plan_file(cy, &cy->files.v[i]);
    return rc;
}
