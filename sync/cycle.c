/* cycle.c - one full sync of one store: the three-way reconciliation of
 * baseline, local and remote (DESIGN.md, Sync), applied.
 *
 *   1. list the store (view=basic; engine_list distrusts the answer);
 *   1b. settle lost uploads whose file is gone: a create that reached the
 *      store after its file was removed (or replaced by a synced file) is
 *      recorded as a deletion, so it never comes back into the mount;
 *   2. tombstones (files removed through the mount), and
 *   3. dirty files: decided by plan.c (create, update, adopt, delete, let
 *      the store win: the local bytes are kept as a conflict record, the
 *      node goes back to its baseline and step 4 brings it to the remote);
 *   4. apply the listing to every clean node (cache_apply_remote) and tell
 *      the kernel what changed;
 *   5. send the writes and record each result (push.c);
 *   6. prefetch content the pull needs.
 * Local writes may land at any time (FUSE threads): every change to a node
 * decided here is conditional on the node still holding what the decision
 * saw (cache_*_if, cache/sent.c), so a concurrent write is never lost; it
 * is simply pushed at the next sync.
 * Only one cycle runs per store at a time (sstore.cycle_lock); no lock is
 * held during HTTP but that one, which FUSE threads never take. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "cycle_int.h"
#include "log.h"

/* An upload not settled after this long will never be: its answer or the
 * listings since have told everything there was to tell. */
#define SENT_KEEP_NS (3600LL * 1000000000LL)

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

const struct cache_remote *remote_find_path(const struct remote *r, const char *path)
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

bool cycle_first_time(struct sstore *st, const char *msg, const char *key, const char *key2)
{
    return engine_first_time(st, msg, key, key2);
}

enum rec_deletions cycle_mode(const struct syncer *s)
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

/* Step 1b.  A create sent for a node that is gone now (removed, or moved
 * over by a file with a memory of its own) whose answer never came: if the
 * store holds its bytes at its path under a memory no file has, that
 * memory is ours and belongs to nothing: recorded as a deletion (under the
 * deletion mode, like the removal it follows).  Records the listing shows
 * already settled (the node has that memory) are forgotten. */
static void settle_lost_creates(struct cycle *cy)
{
    struct syncer *s = cy->s;
    for (size_t i = 0; i < cy->sent.n; i++) {
        const struct cache_sent *x = &cy->sent.v[i];
        if (x->memory_id[0] || (x->node_live && !x->node_id[0]))
            continue; /* an update, or a live new file: plan.c decides */
        const struct cache_remote *at = remote_find_path(&cy->r, x->path);
        if (!at || strcmp(at->sha, x->sha) != 0) {
            cache_sent_drop(s->c, x->id); /* it did not apply */
            continue;
        }
        if (strcmp(x->node_id, at->memory_id) != 0 &&
            !cache_memory_known(s->c, cy->st->id, at->memory_id)) {
            log_info("an upload whose answer was lost reached the store after its file was "
                     "removed; recording it as deleted", "memory_store_id", cy->st->id, "path",
                     x->path, "memory_id", at->memory_id);
            cache_orphan(s->c, cy->st->id, at->memory_id, at->sha, at->path);
        }
        cache_sent_drop(s->c, x->id);
    }
}

/* Whether the store holds, for a file the apply left alone (held by a
 * writer, dirty but not decided, written during the sync), something
 * else than the file's baseline.  The version feed names a change once:
 * a file not decided now would later be decided against its baseline as
 * if nothing changed (a remote rename undone by the file's next update,
 * which a rename cannot refuse).  Until it is decided, the syncs list
 * the store in full. */
static int missed_one(void *arg, const struct cnode *n)
{
    const struct remote *r = arg;
    const struct cache_remote *x = remote_find_id(r, n->memory_id);
    return !x || strcmp(x->sha, n->base_sha) != 0 ||
           strcmp(x->path, n->base_path ? n->base_path : "") != 0;
}

static bool missed_changes(struct cycle *cy)
{
    return cache_unsettled_files(cy->s->c, cy->st->id, missed_one, &cy->r) != 0;
}

/* r as the listing of n memories sorted by path, indexed by memory id
 * (r->by_id: free it). */
static int remote_index(struct remote *r, const struct cache_remote *rl, size_t n)
{
    *r = (struct remote){.by_path = rl, .n = n};
    r->by_id = calloc(n ? n : 1, sizeof(*r->by_id));
    if (!r->by_id)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        r->by_id[i] = &rl[i];
    if (n > 1)
        qsort(r->by_id, n, sizeof(*r->by_id), cmp_id);
    return 0;
}

bool cycle_listing_missed(struct syncer *s, struct sstore *st, const struct cache_remote *r,
                          size_t n)
{
    struct remote rm;
    if (remote_index(&rm, r, n) != 0)
        return true; /* unknown: a full listing decides */
    bool missed = cache_unsettled_files(s->c, st->id, missed_one, &rm) != 0;
    free(rm.by_id);
    return missed;
}

/* A changed file into the files to push (content a writer finished; at
 * the final sync, held content too) or the ones that wait. */
static int sort_changed(void *arg, const struct cnode *n)
{
    struct cycle *cy = arg;
    return collect(cache_pushable(n, cy->final) ? &cy->files : &cy->waiting, n);
}

/* Reloads what the decisions read from the cache. */
static int load_local(struct cycle *cy)
{
    struct syncer *s = cy->s;
    const char *id = cy->st->id;
    int rc = cache_changed_files(s->c, id, sort_changed, cy);
    if (!rc)
        rc = cache_tombstones(s->c, id, &cy->tombs.v, &cy->tombs.n);
    if (!rc && !(cy->tombs.dropped = calloc(cy->tombs.n + 1, sizeof(bool))))
        rc = -ENOMEM;
    return rc;
}

static void report_cap(struct cycle *cy)
{
    struct plan *p = &cy->plan;
    if (!p->held)
        return;
    /* After the writes, so "sent" is true; log_only holds the same deletes
     * at every sync: said once until the numbers change. */
    bool log_only = cycle_mode(cy->s) == REC_DEL_LOG_ONLY;
    char msg[200], key[64];
    snprintf(msg, sizeof(msg), REC_MSG_DELETE_CAP, log_only ? "would send" : "sent",
             p->cap_deletes, p->held);
    snprintf(key, sizeof(key), "%zu/%zu", p->cap_deletes, p->held);
    if (!log_only || cycle_first_time(cy->st, REC_MSG_DELETE_CAP, key, NULL))
        log_warn(msg, "memory_store_id", cy->st->id);
    cy->rep.held = (unsigned)p->held;
}

static int64_t mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec;
}

/* A periodic full listing after syncs from the feed: what it finds that
 * the feed should have reported (a memory changed at or before the
 * watermark that the cache does not have as it is) is logged, and the
 * apply that follows repairs the cache. */
static void count_missed(struct cycle *cy, const struct cache_remote *rl, size_t nr)
{
    struct sstore *st = cy->st;
    if (!st->feed.ready)
        return; /* the first listing: nothing to compare with */
    if (st->feed.want_full)
        return; /* asked for: files left undecided hold what the feed named */
    unsigned missed = 0;
    for (size_t i = 0; i < nr; i++) {
        if (!rl[i].mtime_ns || rl[i].mtime_ns > st->feed.mark_ns)
            continue; /* changed after the last read of the feed */
        char sha[SHA256_HEX_LEN + 1];
        char *path = NULL;
        uint64_t size;
        bool known = cache_baseline_of(cy->s->c, st->id, rl[i].memory_id, sha, &path, &size) == 0;
        bool extra = false;
        for (size_t j = 0; j < st->feed.extra.n && !extra; j++)
            extra = strcmp(st->feed.extra.items[j].id, rl[i].memory_id) == 0;
        if (!extra && (!known || strcmp(sha, rl[i].sha) != 0 || strcmp(path, rl[i].path) != 0))
            missed++;
        free(path);
    }
    if (missed) {
        char n[32];
        snprintf(n, sizeof(n), "%u", missed);
        log_warn("the version feed missed changes that a full listing found; the cache was "
                 "repaired", "memory_store_id", st->id, "memories", n);
    }
}

/* Step 1: what the store holds now, from the feed when it can say (fr is
 * then the read, to commit), else from a full listing (head is then the
 * feed's head, read first).  *idle: the feed shows no change and there is
 * nothing local to push. */
static int find_remote(struct cycle *cy, struct api_list *list, struct cache_remote **rl,
                       size_t *nr, struct feed_read *fr, struct feed_read *head, bool *idle,
                       char *why, size_t whylen)
{
    struct syncer *s = cy->s;
    struct sstore *st = cy->st;
    *idle = false;
    /* The next slice of a backlog, right after the last: the store is as
     * the cache last saw it (a change since is caught by the writes'
     * preconditions, and read at the next pull, an interval at most
     * after the last).  Re-reading the feed for every slice would page
     * through our own writes again and again. */
    if (cy->continuing && feed_usable(s, st, mono_s()) &&
        mono_s() - st->feed.last_read_s < (int64_t)s->o.interval_s) {
        /* Content left to download and nothing to push: the slice only,
         * without deciding every file again. */
        bool work = true;
        cache_store_has_local_work(s->c, st->id, cy->final, &work);
        if (!work && !st->feed.extra.n) {
            *idle = true;
            return 0;
        }
        int rc = feed_view(s, st, fr, list); /* fr empty: nothing to commit */
        return rc ? rc : engine_filter(s, st, list, rl, nr, why, whylen);
    }
    if (feed_usable(s, st, mono_s())) {
        int rc = feed_read(s, st, st->known, fr, why, whylen);
        /* No feed after all (404), or too many failures: list instead. */
        if (rc && !feed_usable(s, st, mono_s()))
            rc = 0, fr->untrusted = true, fr->why = "the version feed cannot be read";
        if (rc)
            return rc;
        if (!fr->untrusted) {
            bool work = true;
            cache_store_has_local_work(s->c, st->id, cy->final, &work);
            if (!work && !fr->changes.n && !fr->n_gone && !st->feed.extra.n) {
                *idle = true;
                return 0;
            }
            rc = feed_view(s, st, fr, list);
            cy->read = rc == 0;
            return rc ? rc : engine_filter(s, st, list, rl, nr, why, whylen);
        }
        if (engine_first_time(st, fr->why, NULL, NULL))
            log_info("listing the whole store instead of reading the version feed",
                     "memory_store_id", st->id, "reason", fr->why);
        feed_read_free(fr);
    }
    /* The head first: whatever is written during the listing is then in
     * the next read of the feed. */
    if (feed_head(s, st, head) != 0)
        memset(head, 0, sizeof(*head)); /* no watermark: the next sync lists again */
    int rc = engine_list(s, st, false, list, rl, nr, why, whylen);
    if (!rc)
        count_missed(cy, *rl, *nr);
    cy->read = rc == 0;
    return rc;
}

/* What is left unpushed after a round, into rep: part of the answer on
 * every path (a round with nothing to do still leaves a file a writer
 * holds open, or one the server refused). */
static int count_left(struct syncer *s, const struct sstore *st, struct syncer_report *rep)
{
    struct cache_store_stats after;
    int rc = cache_store_pending(s->c, st->id, &after);
    if (rc)
        return rc;
    /* Deletions this process may not send (log_only, disabled, the
     * deletion's own mode) are kept, not pending. */
    uint64_t kept = cycle_mode(s) == REC_DEL_ENABLED ? after.kept_deletions : after.tombstones;
    rep->pending = (unsigned)(after.dirty + after.tombstones - kept);
    rep->kept_deletions = (unsigned)kept;
    rep->unsaved = (unsigned)after.unsaved;
    return 0;
}

/* Whether the view read now changes row's memory: another content than
 * the node's baseline, or no memory at all (deleted remotely). */
static bool remote_changes(struct cycle *cy, uint64_t row)
{
    struct cnode n = {0};
    bool changes = false;
    if (cache_getattr(cy->s->c, row, &n) == 0 && !n.is_dir && !n.unlinked && n.memory_id[0]) {
        const struct cache_remote *r = remote_find_id(&cy->r, n.memory_id);
        changes = !r || strcmp(r->sha ? r->sha : "", n.base_sha) != 0;
    }
    cnode_clear(&n);
    return changes;
}

/* Before the decisions read the cache (load_local): the pages a shared
 * writable mapping dirtied reach the daemon only when the kernel writes
 * them back, up to half a minute later.  Brought by the store's version
 * instead, they were laid over it (the file's buffer had gone back to the
 * store's content): a mix of the two versions, pushed as an edit on the
 * store's.  Written now, for the files open for writing whose memory the
 * store changed, they are a local edit the decisions see: the store wins
 * and the edit is kept as a conflict record, as any other.  (Pages a
 * mapping dirties between this and the apply, milliseconds later, are
 * still laid over the store's version.) */
static void settle_mapped_pages(struct cycle *cy)
{
    const struct sync_notify *n = &cy->st->n;
    if (!n->writing || !n->settle_pages)
        return;
    uint64_t *rows = NULL;
    size_t k = n->writing(n->arg, &rows);
    for (size_t i = 0; i < k; i++)
        if (remote_changes(cy, rows[i]))
            n->settle_pages(n->arg, rows[i]);
    free(rows);
}

/* A node sent back to its baseline may keep its hash (a remote rename of
 * content it had): the kernel's pages of it held the local bytes.  Each
 * is told once. */
static void forget_reverted_pages(struct cycle *cy)
{
    struct sstore *st = cy->st;
    for (size_t i = 0; i < cy->n_reverted; i++)
        if (st->n.inval_inode)
            st->n.inval_inode(st->n.arg, cy->reverted[i]);
    cy->n_reverted = 0;
}

int cycle_run(struct syncer *s, int idx, bool final, char *why, size_t whylen,
              struct syncer_report *own)
{
    struct sstore *st = &s->v[idx];
    struct cycle cy = {.s = s, .st = st, .final = final};
    struct api_list list = {0};
    struct cache_remote *rl = NULL;
    size_t nr = 0;
    struct feed_read fr = {0}, head = {0};
    bool idle = false;

    struct timespec t0;
    clock_gettime(CLOCK_REALTIME, &t0);
    const int64_t started_ns = (int64_t)t0.tv_sec * 1000000000LL + t0.tv_nsec;
    pthread_mutex_lock(&st->cycle_lock);
    /* The final sync reads the store whatever came before it: a round cut
     * short for it may have lost answers that only a read settles. */
    cy.continuing = st->backlog && !final;
    st->backlog = false;
    if (st->disabled) {
        pthread_mutex_unlock(&st->cycle_lock);
        snprintf(why, whylen, "memory store %s is not mounted any more", st->id);
        return -ESHUTDOWN;
    }
    int rc = find_remote(&cy, &list, &rl, &nr, &fr, &head, &idle, why, whylen);
    if (rc)
        goto out;
    if (idle) {
        /* Nothing changed on either side: one request (none for the next
         * slice of a download), no work. */
        if (fr.ok)
            feed_commit(st, &fr);
        if (st->content_missing && !final) /* not at the final sync: below */
            engine_prefetch(s, idx, ENGINE_FETCH_SLICE);
        if ((rc = count_left(s, st, &cy.rep)) != 0)
            goto fail;
        snprintf(why, whylen, "ok");
        goto out;
    }
    if ((rc = remote_index(&cy.r, rl, nr)))
        goto fail;
    settle_mapped_pages(&cy);

    struct cache_store_stats cs;
    if ((rc = cache_store_stats(s->c, st->id, &cs)))
        goto fail;
    /* The cap is a share of the store's baseline (D.6), which still counts
     * the memories deleted locally: live files alone would shrink the cap
     * with every rm (40 memories, 20 removed: 8 instead of 10). */
    cy.plan.limit = rec_delete_cap(cs.files + cs.tombstones);
    if ((rc = cache_sent_list(s->c, st->id, &cy.sent.v, &cy.sent.n)))
        goto fail;
    /* Only against a view read from the store: the next slice of a
     * backlog decides against the cache's baselines, where a create whose
     * answer was lost cannot show, and dropping its record there let its
     * memory come back into the mount after its file was removed. */
    if (cy.read)
        settle_lost_creates(&cy);
    if ((rc = load_local(&cy)) || (rc = plan_all(&cy)))
        goto fail;
    if ((rc = engine_apply(s, st, rl, nr, why, whylen)))
        goto out;
    /* The remote side is applied: the feed's watermark moves (or, after a
     * full listing, is set from the head read before it). */
    /* Uploads an hour old whose answer never came and which this read of
     * the store (the feed, or a full listing) did not settle go: it has
     * told what there was to tell.  Only after the decisions that used
     * them, and only uploads sent before the read: pruned before, a
     * machine offline for over an hour lost the record of an upload the
     * store took, and the edit made since lost to that very upload. */
    if (cy.read) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        int64_t cut = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec - SENT_KEEP_NS;
        cache_sent_prune(s->c, st->id, cut < started_ns ? cut : started_ns);
    }
    bool missed = (fr.ok || head.ok) && missed_changes(&cy);
    /* What the apply could not place is offered again, whatever the view
     * came from: a memory of the cache's own baselines too (a file the
     * store won back that could not return to its path, a new file
     * holding it, lost its node; left out of later views, the new file's
     * create met that memory, 409, at every sync).  Only where the feed
     * is read: a store listed in full at every sync needs no such list. */
    if (fr.ok || head.ok || (cy.continuing && !cy.read))
        feed_keep_listed_unplaced(s, st, rl, nr);
    if (fr.ok) {
        feed_commit(st, &fr);
        if (missed)
            st->feed.want_full = true;
    } else if (head.ok) {
        feed_commit(st, &head);
        st->feed.ready = true;
        st->feed.want_full = missed;
        st->feed.last_full_s = mono_s();
    }
    st->known = nr;
    forget_reverted_pages(&cy);
    push_writes(&cy);
    report_cap(&cy);
    /* Files past the slice wait for the next round, which comes at once
     * if this one moved something (engine.c run). */
    if (cy.plan.deferred && cy.rep.pushed)
        st->backlog = true;
    /* Not at the final sync: content downloaded for a mount going away
     * would only spend the flush timeout the other stores' pushes need. */
    if (!final)
        engine_prefetch(s, idx, ENGINE_FETCH_SLICE);

    /* What is left is part of the answer: not known, the sync fails
     * (a report of "pending 0" would say everything was pushed). */
    if ((rc = count_left(s, st, &cy.rep)) != 0)
        goto fail;
    snprintf(why, whylen, "ok");
    goto out;
fail:
    snprintf(why, whylen, "sync of memory store %s failed: %s", st->id, strerror(-rc));
out:
    /* Also when planning or applying failed after the store won: a node
     * reverted is reverted in the cache whatever the round did next. */
    forget_reverted_pages(&cy);
    engine_set_result(s, st, rc ? why : "ok", &cy.rep);
    if (own)
        *own = cy.rep;
    /* The final sync is the store's last: a sync that waited for the lock
     * meanwhile (the periodic one, `sync --wait`, a restore's) must not
     * run another, with no deadline, while the unmount waits for it in
     * syncer_disable. */
    if (final)
        st->disabled = true;
    pthread_mutex_unlock(&st->cycle_lock);
    plan_free(&cy.plan);
    files_free(&cy.files);
    files_free(&cy.waiting);
    cache_tombstones_free(cy.tombs.v, cy.tombs.n);
    free(cy.tombs.dropped);
    cache_sent_free(cy.sent.v, cy.sent.n);
    feed_read_free(&fr);
    feed_read_free(&head);
    free(cy.reverted);
    free(cy.r.by_id);
    free(rl);
    api_list_free(&list);
    return rc;
}
