/* cycle.c - one full sync of one store: the three-way reconciliation of
 * baseline, local and remote (DESIGN.md, Sync), applied.
 *
 *   1. list the store (view=basic);
 *   2. tombstones (files removed through the mount): decide each with
 *      rec_decide: delete remotely (with expected_content_sha256, at most
 *      rec_delete_cap per sync), log only, keep, or restore;
 *   3. dirty files: decide each: create, update (content and/or path, with
 *      the precondition), adopt, or let the store win (the local bytes are
 *      kept as a conflict record, the node goes back to its baseline and
 *      step 4 brings it to the remote);
 *   4. apply the listing to every clean node (cache_apply_remote) and tell
 *      the kernel what changed;
 *   5. send the writes and record each result (push.c);
 *   6. prefetch content the pull needs.
 * Local writes may land at any time (FUSE threads): every change to a node
 * decided here is conditional on the node still holding what the decision
 * saw (cache_*_if, cache_mark_synced), so a concurrent write is never lost;
 * it is simply pushed at the next sync.
 * Only one cycle runs per store at a time (sstore.cycle_lock); no lock is
 * held during HTTP but that one, which FUSE threads never take. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "cycle_int.h"
#include "log.h"



static int collect(void *arg, const struct cnode *n)
{
    struct files *f = arg;
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 32;
        struct file *v = realloc(f->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        f->v = v;
        f->cap = cap;
    }
    struct file *x = &f->v[f->n];
    memset(x, 0, sizeof(*x));
    x->n = *n;
    x->n.name = strdup(n->name ? n->name : "");
    x->n.path = strdup(n->path ? n->path : "");
    x->n.base_path = strdup(n->base_path ? n->base_path : "");
    if (!x->n.name || !x->n.path || !x->n.base_path) {
        cnode_clear(&x->n);
        return -ENOMEM;
    }
    snprintf(x->refused_sha, sizeof(x->refused_sha), "%s", n->refused_sha);
    f->n++;
    return 0;
}

static void files_free(struct files *f)
{
    for (size_t i = 0; i < f->n; i++)
        cnode_clear(&f->v[i].n);
    free(f->v);
}


static int cmp_id(const void *a, const void *b)
{
    return strcmp((*(const struct cache_remote *const *)a)->memory_id,
                  (*(const struct cache_remote *const *)b)->memory_id);
}

const struct cache_remote *remote_find_id(const struct remote *r, const char *id)
{
    size_t lo = 0, hi = r->n;
    while (id && *id && lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(r->by_id[mid]->memory_id, id);
        if (!c)
            return r->by_id[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static const struct cache_remote *find_path(const struct remote *r, const char *path)
{
    size_t lo = 0, hi = r->n;
    while (path && lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(r->by_path[mid].path, path);
        if (!c)
            return &r->by_path[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static const char *sent_of(const struct sstore *st, uint64_t ino)
{
    for (size_t i = 0; i < st->n_sent; i++)
        if (st->sent[i].ino == ino)
            return st->sent[i].sha;
    return NULL;
}

void cycle_sent_set(struct sstore *st, uint64_t ino, const char *sha)
{
    for (size_t i = 0; i < st->n_sent; i++) {
        if (st->sent[i].ino == ino) {
            if (sha)
                snprintf(st->sent[i].sha, sizeof(st->sent[i].sha), "%s", sha);
            else
                st->sent[i] = st->sent[--st->n_sent];
            return;
        }
    }
    if (!sha)
        return;
    struct sent *v = realloc(st->sent, (st->n_sent + 1) * sizeof(*v));
    if (!v)
        return; /* only a missed optimisation: the next sync may report a conflict */
    st->sent = v;
    v[st->n_sent].ino = ino;
    snprintf(v[st->n_sent].sha, sizeof(v[0].sha), "%s", sha);
    st->n_sent++;
}

/* Logs msg for (path, sha) unless this standing state was logged already. */
static bool first_time(struct sstore *st, const char *msg, const char *path, const char *sha)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = msg; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (const char *p = path ? path : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (const char *p = sha ? sha : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (size_t i = 0; i < st->n_said; i++)
        if (st->said[i] == h)
            return false;
    if (st->n_said >= 4096)
        st->n_said = 0;
    uint64_t *v = realloc(st->said, (st->n_said + 1) * sizeof(*v));
    if (v) {
        st->said = v;
        v[st->n_said++] = h;
    }
    return true;
}

static void say(struct sstore *st, const struct rec_out *o, const char *path, const char *sha)
{
    if (!o->msg || (o->standing && !first_time(st, o->msg, path, sha)))
        return;
    log_event(o->level, o->msg, "memory_store_id", st->id, "path", path, NULL);
}



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

static void plan_free(struct plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->v[i].path);
        free(p->v[i].where);
        free(p->v[i].content);
    }
    free(p->v);
}

static enum rec_deletions mode_of(const struct syncer *s)
{
    switch (s->o.deletions) {
    case SYNCER_DEL_LOG_ONLY:
        return REC_DEL_LOG_ONLY;
    case SYNCER_DEL_DISABLED:
        return REC_DEL_DISABLED;
    default:
        return REC_DEL_ENABLED;
    }
}

/* The tombstones of the store, loaded once per sync. */
struct tombs {
    struct cache_tombstone *v;
    size_t n;
};

/* A file never synced at the path of a memory deleted locally (rm f; then
 * a new f) takes that memory over: the pair is one update of the memory,
 * as an overwrite would be, not a delete racing a create at the same path
 * (which met the memory still there and threw the new file away as a
 * conflict).  The tombstone such a file takes over, or NULL. */
static const struct cache_tombstone *taken_over(const struct tombs *t, const struct cnode *n)
{
    if (n->memory_id[0])
        return NULL;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].base_path && strcmp(t->v[i].base_path, n->path) == 0)
            return &t->v[i];
    return NULL;
}

static bool tomb_taken(const struct files *f, const struct cache_tombstone *t)
{
    for (size_t i = 0; i < f->n; i++)
        if (!f->v[i].n.memory_id[0] && t->base_path && strcmp(f->v[i].n.path, t->base_path) == 0)
            return true;
    return false;
}

/* Another local file (renamed away from its baseline path) holds memory id. */
static bool owned_elsewhere(const struct files *f, const char *id, uint64_t ino)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].n.ino != ino && f->v[i].n.memory_id[0] && strcmp(f->v[i].n.memory_id, id) == 0)
            return true;
    return false;
}

/* The dirty file renamed away from the remote path of memory id, if any. */
static const struct cnode *renamed_with(const struct files *f, const struct remote *r,
                                        const char *id)
{
    const struct cache_remote *m = remote_find_id(r, id);
    for (size_t i = 0; m && i < f->n; i++)
        if (strcmp(f->v[i].n.memory_id, id) == 0 && strcmp(f->v[i].n.path, m->path) != 0)
            return &f->v[i].n;
    return NULL;
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
static const struct cache_remote *cycle_target(const struct remote *r, const struct files *f,
                                               const struct cnode *n)
{
    const struct cache_remote *x = find_path(r, n->path);
    if (!x || !n->memory_id[0] || strcmp(x->memory_id, n->memory_id) == 0)
        return NULL;
    const char *id = x->memory_id;
    for (size_t hops = 0; hops <= f->n; hops++) {
        const struct cnode *g = renamed_with(f, r, id);
        if (!g)
            return NULL; /* X stays where it is: a real path conflict */
        const struct cache_remote *h = find_path(r, g->path);
        if (!h)
            return NULL; /* a chain onto a free path */
        if (strcmp(h->memory_id, n->memory_id) == 0)
            return x;
        id = h->memory_id;
    }
    return NULL;
}

/* Step 2: tombstones. */
static int plan_tombstones(struct syncer *s, struct sstore *st, const struct remote *r,
                           const struct tombs *tb, const struct files *files, struct plan *p,
                           struct syncer_report *rep)
{
    const struct cache_tombstone *t = tb->v;
    size_t n = tb->n;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (tomb_taken(files, &t[i]))
            continue; /* a new file at its path updates the memory (plan_file) */
        const struct cache_remote *rm = remote_find_id(r, t[i].memory_id);
        struct rec_in in = {
            .memory_id = t[i].memory_id, .base_sha = t[i].base_sha, .base_path = t[i].base_path,
            .local = REC_L_DELETED, .path = t[i].base_path, .remote = rm != NULL,
            .remote_id = rm ? rm->memory_id : NULL, .remote_sha = rm ? rm->sha : NULL,
            .remote_path = rm ? rm->path : NULL,
            .access = st->read_only ? REC_READ_ONLY : REC_READ_WRITE, .deletions = mode_of(s),
        };
        struct rec_out o;
        rec_decide(&in, &o);
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
            j->path = strdup(t[i].base_path ? t[i].base_path : "");
            snprintf(j->sha, sizeof(j->sha), "%s", o.expect_sha ? o.expect_sha : "");
            snprintf(j->memory_id, sizeof(j->memory_id), "%s", t[i].memory_id);
            p->cap_deletes++;
            break;
        }
        case REC_LOG_DELETE:
            p->cap_deletes++;
            p->log_deletes++;
            say(st, &o, t[i].base_path, t[i].base_sha);
            break;
        case REC_NOTHING:
            break;
        default:
            /* Keep remote, restore, forget: the tombstone goes; the
             * listing applied in step 4 shows the server's copy again. */
            say(st, &o, t[i].base_path, t[i].base_sha);
            if (o.action == REC_RESTORE)
                rep->conflicts++;
            cache_tombstone_drop(s->c, st->id, t[i].memory_id);
            break;
        }
        if (rc)
            break;
    }
    return rc;
}

/* Step 3 for one dirty file. */
static int plan_file(struct syncer *s, struct sstore *st, const struct remote *r,
                     const struct tombs *tb, const struct files *files, struct file *f,
                     struct plan *p, struct syncer_report *rep, uint64_t **reverted,
                     size_t *n_reverted)
{
    const struct cnode *n = &f->n;
    const struct cache_tombstone *tk = taken_over(tb, n);
    const char *base_id = tk ? tk->memory_id : n->memory_id;
    const struct cache_remote *rm = base_id[0] ? remote_find_id(r, base_id) : find_path(r, n->path);
    /* A memory listed at the path of a new file but renamed away locally
     * frees the path: the rename goes out first (send_writes), then the
     * create.  Not a conflict. */
    if (rm && !base_id[0] && owned_elsewhere(files, rm->memory_id, n->ino))
        rm = NULL;
    struct rec_in in = {
        .memory_id = base_id, .base_sha = tk ? tk->base_sha : n->base_sha,
        .base_path = tk ? tk->base_path : n->base_path,
        .local = REC_L_FILE, .sha = n->sha, .path = n->path, .dirty = true,
        .refused_sha = f->refused_sha, .sent_sha = sent_of(st, n->ino),
        .remote = rm != NULL, .remote_id = rm ? rm->memory_id : NULL,
        .remote_sha = rm ? rm->sha : NULL, .remote_path = rm ? rm->path : NULL,
        .access = st->read_only ? REC_READ_ONLY : REC_READ_WRITE, .deletions = mode_of(s),
    };
    struct rec_out o;
    rec_decide(&in, &o);
    say(st, &o, n->path, n->sha);
    if (o.adopted_sent)
        cycle_sent_set(st, n->ino, NULL);
    int rc = 0;
    switch (o.action) {
    case REC_CREATE:
    case REC_RECREATE:
    case REC_UPDATE: {
        bool update = o.action == REC_UPDATE;
        /* A cycle of renames sends the content to the memory at the path
         * instead (see cycle_target). */
        const struct cache_remote *x = update && o.send_path ? cycle_target(r, files, n) : NULL;
        bool send_content = !update || o.send_content || x;
        bool send_path = !update || (o.send_path && !x);
        char *buf = NULL;
        size_t len = 0;
        if (send_content) {
            rc = cache_blob_get(s->c, n->sha, &buf, &len);
            if (rc)
                return rc == -ENOENT ? 0 : rc; /* being rewritten: next sync */
        }
        struct job *j = plan_add(p);
        if (!j) {
            free(buf);
            return -ENOMEM;
        }
        j->action = o.action;
        j->ino = n->ino;
        snprintf(j->node_id, sizeof(j->node_id), "%s", n->memory_id);
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
        rc = cache_mark_synced(s->c, n->ino, rm->memory_id, rm->sha, rm->path);
        if (!rc && tk)
            rc = cache_tombstone_drop(s->c, st->id, tk->memory_id);
        break;
    case REC_NOTHING:
        /* Dirty but equal to the baseline (e.g. written back to it). */
        if (n->memory_id[0])
            rc = cache_mark_synced(s->c, n->ino, n->memory_id, n->base_sha, n->base_path);
        break;
    case REC_PULL:
    case REC_CONFLICT_PULL:
    case REC_RESTORE:
        if (o.keep_local) {
            rc = cache_conflict_add(s->c, st->id, n->path, n->memory_id, n->sha,
                                    rm ? rm->sha : "");
            if (rc)
                return rc;
            rep->conflicts++;
        }
        if (o.base_id && *o.base_id && rm && strcmp(o.base_id, rm->memory_id) == 0 &&
            n->memory_id[0]) {
            /* Back to the baseline; step 4 brings it to the remote. */
            rc = cache_revert_if(s->c, n->ino, n->sha, n->path);
            if (!rc) {
                uint64_t *v = realloc(*reverted, (*n_reverted + 1) * sizeof(*v));
                if (v) {
                    *reverted = v;
                    v[(*n_reverted)++] = n->ino;
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
            rc = cache_forget_base(s->c, n->ino);
        if (o.action == REC_SKIP_REFUSED)
            rep->refused++;
        break;
    default:
        break;
    }
    return rc;
}

int cycle_run(struct syncer *s, int idx, char *why, size_t whylen)
{
    struct sstore *st = &s->v[idx];
    struct syncer_report rep = {0};
    struct api_list list = {0};
    struct cache_remote *rl = NULL;
    size_t nr = 0;
    struct files files = {0};
    struct plan plan = {0};
    uint64_t *reverted = NULL;
    size_t n_reverted = 0;
    struct remote r = {0};
    struct tombs tombs = {0};

    pthread_mutex_lock(&st->cycle_lock);
    if (st->disabled) {
        pthread_mutex_unlock(&st->cycle_lock);
        snprintf(why, whylen, "memory store %s is not mounted any more", st->id);
        return -ESHUTDOWN;
    }
    int rc = engine_list(s, st, &list, &rl, &nr, why, whylen);
    if (rc)
        goto out;
    r.by_path = rl;
    r.n = nr;
    r.by_id = calloc(nr ? nr : 1, sizeof(*r.by_id));
    if (!r.by_id) {
        rc = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < nr; i++)
        r.by_id[i] = &rl[i];
    qsort(r.by_id, nr, sizeof(*r.by_id), cmp_id);

    struct cache_store_stats cs;
    if ((rc = cache_store_stats(s->c, st->id, &cs)))
        goto fail;
    /* The cap is a share of the store's baseline (D.6), which still counts
     * the memories deleted locally: live files alone would shrink the cap
     * with every rm (40 memories, 20 removed: 8 instead of 10). */
    plan.limit = rec_delete_cap(cs.files + cs.tombstones);
    if ((rc = cache_dirty_files(s->c, st->id, collect, &files)))
        goto fail;
    if ((rc = cache_tombstones(s->c, st->id, &tombs.v, &tombs.n)))
        goto fail;
    if ((rc = plan_tombstones(s, st, &r, &tombs, &files, &plan, &rep)))
        goto fail;
    for (size_t i = 0; i < files.n && !rc; i++)
        rc = plan_file(s, st, &r, &tombs, &files, &files.v[i], &plan, &rep, &reverted,
                       &n_reverted);
    if (rc)
        goto fail;
    if ((rc = engine_apply(s, st, rl, nr, why, whylen)))
        goto out;
    /* A node sent back to its baseline may keep its hash (a remote rename
     * of content it had): its pages held the local bytes. */
    for (size_t i = 0; i < n_reverted; i++)
        if (st->n.inval_inode)
            st->n.inval_inode(st->n.arg, reverted[i]);
    push_writes(s, st, &r, &plan, &rep);
    if (plan.held) {
        /* After the writes, so "sent" is true; log_only holds the same
         * deletes at every sync: said once until the numbers change. */
        char msg[200], key[64];
        snprintf(msg, sizeof(msg), REC_MSG_DELETE_CAP,
                 mode_of(s) == REC_DEL_LOG_ONLY ? "would send" : "sent",
                 plan.cap_deletes, plan.held);
        snprintf(key, sizeof(key), "%zu/%zu", plan.cap_deletes, plan.held);
        if (mode_of(s) != REC_DEL_LOG_ONLY || first_time(st, REC_MSG_DELETE_CAP, key, NULL))
            log_warn(msg, "memory_store_id", st->id);
        rep.held = (unsigned)plan.held;
    }
    engine_prefetch(s, idx);

    struct cache_store_stats after;
    if (cache_store_stats(s->c, st->id, &after) == 0)
        rep.pending = (unsigned)(after.dirty + after.tombstones);
    snprintf(why, whylen, "ok");
    goto out;
fail:
    snprintf(why, whylen, "sync of memory store %s failed: %s", st->id, strerror(-rc));
out:
    engine_set_result(s, st, rc ? why : "ok", &rep);
    pthread_mutex_unlock(&st->cycle_lock);
    plan_free(&plan);
    files_free(&files);
    cache_tombstones_free(tombs.v, tombs.n);
    free(reverted);
    free(r.by_id);
    free(rl);
    api_list_free(&list);
    return rc;
}
