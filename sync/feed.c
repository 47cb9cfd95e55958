/* feed.c - change detection from a store's version feed (issue 11,
 * docs/sync.md "How a sync finds what changed"): a sync of a store where
 * nothing changed is one request, whatever its size.
 *
 * State (struct feed in struct sstore, under the store's cycle_lock):
 *  - the watermark mark_ns: the server's clock (its Date header) when the
 *    last applied read started, or, when the server sends no Date, the
 *    newest created_at it read (the server's clock either way, never ours);
 *  - seen[]: the ids of the versions read at or after mark_ns - OVERLAP;
 *  - extra: memories the store holds, by the last read (the feed's view
 *    or a full listing), that the cache could not take yet (below a local
 *    file, at the path of a new file its writer holds, ...), offered again
 *    to every later sync; each apply replaces it with what it could not
 *    place.
 * A read asks for every version created at or after mark_ns - OVERLAP
 * (newest first): a write stamped before the last read started but not
 * visible to it (committed late, at most OVERLAP after its stamp) is in
 * that window, and once the store is idle for OVERLAP the window is empty,
 * so an idle sync is one request with an empty page.  Per memory, its newest version in that window is its
 * state; if that version was seen before, the memory is as the cache has
 * it; otherwise it changed: deleted, or now at (path, hash).  A redacted
 * newest version says nothing: that memory is retrieved.  Changes that
 * are already the cache's baseline (the daemon's own pushes coming back)
 * are dropped without a download.  The overlap and the ids seen let writes
 * that share a millisecond, or are stamped earlier than a version already
 * read (arriving late), be picked up exactly once; the state of such a
 * memory (its run holds two versions of one millisecond, or an unseen
 * version behind one seen) is not taken from the order of the run, which
 * is the server's clock's, but asked for (the memory is retrieved).
 *
 * The feed is not trusted beyond what it can settle: no watermark yet (a
 * full listing sets it, reading the feed's head first so nothing written
 * during the listing is missed), a 404 (no feed: full listings from then
 * on), a malformed item, more pages than a listing would cost, or
 * FAILURES_MAX failures in a row: the caller lists the store instead.
 *
 * What feed_read returns is committed (feed_commit) only once the sync
 * that applied it succeeded, so a failed sync reads the same window again.
 * The listing a sync decides against is built from the cache's baselines
 * patched with the changes (feed_view), so cycle.c, plan.c and the apply
 * step work exactly as with a full listing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "cycle_int.h"
#include "log.h"
#include "rules.h"

#define OVERLAP_NS (30LL * 1000000000LL)
#define FAILURES_MAX 3
#define PAGES_MIN 5

void feed_free(struct feed *fd)
{
    free(fd->seen);
    api_list_free(&fd->extra);
    memset(fd, 0, sizeof(*fd));
}

void feed_read_free(struct feed_read *fr)
{
    api_list_free(&fr->changes);
    for (size_t i = 0; i < fr->n_gone; i++)
        free(fr->gone[i]);
    free(fr->gone);
    free(fr->seen);
    memset(fr, 0, sizeof(*fr));
}

/* ns since the epoch as an RFC 3339 time with milliseconds, rounded down
 * (a lower gte bound only reads a little more). */
static void format_time(int64_t ns, char out[48])
{
    time_t secs = (time_t)(ns / 1000000000LL);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, 48, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 48 - n, ".%03dZ", (int)(ns % 1000000000LL / 1000000LL));
}

static int cmp_seen(const void *a, const void *b)
{
    return strcmp(((const struct feed_seen *)a)->id, ((const struct feed_seen *)b)->id);
}

/* fd->seen is sorted by id (feed_commit). */
static bool was_seen(const struct feed *fd, const char *id)
{
    struct feed_seen key;
    snprintf(key.id, sizeof(key.id), "%s", id);
    return fd->n_seen && bsearch(&key, fd->seen, fd->n_seen, sizeof(key), cmp_seen);
}

/* Indices of a feed read ordered by (memory_id, position): the first of
 * each run is that memory's newest version. */
static int cmp_by_memory(const void *a, const void *b, void *arg)
{
    const struct api_versions *v = arg;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(v->items[x].memory_id, v->items[y].memory_id);
    return c ? c : (x < y ? -1 : x > y);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The ids a feed read changed (gone or changed), sorted, for bsearch. */
static char **changed_ids(const struct feed_read *fr, size_t *n)
{
    char **v = calloc(fr->n_gone + fr->changes.n + 1, sizeof(*v));
    if (!v)
        return NULL;
    *n = 0;
    for (size_t i = 0; i < fr->n_gone; i++)
        v[(*n)++] = fr->gone[i];
    for (size_t i = 0; i < fr->changes.n; i++)
        v[(*n)++] = fr->changes.items[i].id;
    if (*n > 1)
        qsort(v, *n, sizeof(*v), cmp_str);
    return v;
}

static bool in_ids(char **v, size_t n, const char *id)
{
    return n && bsearch(&id, v, n, sizeof(*v), cmp_str);
}

static int add_gone(struct feed_read *fr, const char *id)
{
    char **v = realloc(fr->gone, (fr->n_gone + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    fr->gone = v;
    return (v[fr->n_gone] = strdup(id)) ? (fr->n_gone++, 0) : -ENOMEM;
}

/* A change that the cache already has as its baseline (our own push, or a
 * version applied by a listing since) needs nothing. */
static bool already_known(struct syncer *s, struct sstore *st, const char *id, const char *sha,
                          const char *path)
{
    char bsha[SHA256_HEX_LEN + 1];
    char *bpath = NULL;
    uint64_t size;
    if (cache_baseline_of(s->c, st->id, id, bsha, &bpath, &size) != 0)
        return false;
    bool same = strcmp(bsha, sha) == 0 && strcmp(bpath, path) == 0;
    free(bpath);
    return same;
}

/* The memories whose newest version was redacted, or whose state the order
 * of their versions cannot tell: asked for directly. */
static int settle_redacted(struct syncer *s, struct sstore *st, struct feed_read *fr,
                           char **ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct api_fetch f = {.memory_id = ids[i]};
        api_memories_fetch(s->h, st->id, &f, 1);
        int rc = f.err;
        if (rc == -ENOENT)
            rc = add_gone(fr, ids[i]);
        else if (!rc) {
            /* Its content came with it: kept (by its hash), not asked for
             * again by the prefetch. */
            if (f.mem.content)
                (void)engine_keep_fetched(s, &f.mem, f.mem.sha);
            rc = api_list_add_version(&fr->changes, f.mem.id, f.mem.path, f.mem.sha,
                                      f.mem.size, f.mem.updated_ns, f.mem.version_id);
        }
        api_memory_clear(&f.mem);
        api_error_clear(&f.e);
        if (rc)
            return rc;
    }
    return 0;
}

int feed_read(struct syncer *s, struct sstore *st, size_t memories, struct feed_read *fr,
              char *why, size_t whylen)
{
    struct feed *fd = &st->feed;
    memset(fr, 0, sizeof(*fr));
    char gte[48];
    format_time(fd->mark_ns > OVERLAP_NS ? fd->mark_ns - OVERLAP_NS : 0, gte);
    /* Past what a listing of the store would cost, list it instead. */
    size_t pages = memories / 100 + 1;
    struct api_versions v = {0};
    struct api_error e = {0};
    int rc = api_versions_since(s->h, st->id, gte, 100, pages < PAGES_MIN ? PAGES_MIN : pages,
                                &v, &e);
    if (rc) {
        if (rc == -ENOENT && e.status == 404) {
            fd->unsupported = true;
            log_warn("the server has no version feed; every sync lists the whole store",
                     "memory_store_id", st->id);
        } else if (++fd->failures >= FAILURES_MAX) {
            fd->failures = 0;
            fd->ready = false; /* the next sync lists the store */
        }
        snprintf(why, whylen, "cannot read the version feed of memory store %s: %s%s%s", st->id,
                 e.status ? e.type : strerror(-rc), e.message[0] ? ": " : "", e.message);
        api_error_clear(&e);
        return rc;
    }
    if (v.n_bad || !v.complete) {
        fr->untrusted = true;
        fr->why = v.n_bad ? "the version feed had a malformed item"
                          : "more changes than a listing of the store would cost";
        api_versions_free(&v);
        return 0;
    }
    fr->mark_ns = fd->mark_ns;
    for (size_t i = 0; i < v.n; i++)
        if (v.items[i].created_ns > fr->mark_ns)
            fr->mark_ns = v.items[i].created_ns;
    if (v.server_ns > fr->mark_ns)
        fr->mark_ns = v.server_ns;
    fr->seen = calloc(v.n ? v.n : 1, sizeof(*fr->seen));
    char **redacted = calloc(v.n ? v.n : 1, sizeof(*redacted));
    size_t *ix = calloc(v.n ? v.n : 1, sizeof(*ix)), n_redacted = 0;
    rc = fr->seen && redacted && ix ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i < v.n; i++) {
        const struct api_version *x = &v.items[i];
        ix[i] = i;
        if (x->created_ns >= fr->mark_ns - OVERLAP_NS) {
            snprintf(fr->seen[fr->n_seen].id, sizeof(fr->seen[0].id), "%s", x->id);
            fr->seen[fr->n_seen++].at_ns = x->created_ns;
        }
    }
    if (!rc && v.n > 1)
        qsort_r(ix, v.n, sizeof(*ix), cmp_by_memory, &v);
    for (size_t k = 0; !rc && k < v.n; k++) {
        /* Only the newest version of each memory (the first of its run)
         * says what the memory is now. */
        if (k && strcmp(v.items[ix[k]].memory_id, v.items[ix[k - 1]].memory_id) == 0)
            continue;
        const struct api_version *x = &v.items[ix[k]];
        /* A memory id is never used again: a deletion anywhere in its run
         * (versions stamped in the same millisecond may come in either
         * order) says it is gone, whatever the run's first says. */
        bool deleted = false, unseen = false;
        for (size_t q = k; q < v.n && strcmp(v.items[ix[q]].memory_id, x->memory_id) == 0; q++) {
            const struct api_version *y = &v.items[ix[q]];
            if (y->op == API_OP_DELETED && !y->redacted) { /* redacted: asked for below */
                deleted = true;
                unseen = unseen || !was_seen(fd, y->id);
            }
        }
        if (deleted) {
            /* Said once: a deletion already seen was applied then. */
            if (unseen)
                rc = add_gone(fr, x->memory_id);
            continue;
        }
        /* Newest first is the server's clock's order: versions stamped in
         * one millisecond may come in any order, and a version committed
         * late (stamped before one already read) comes after it.  Either
         * way the run's first is not known to be the memory's state: the
         * memory is retrieved, as for a redacted version. */
        bool first_seen = was_seen(fd, x->id), tie = false, unseen_behind = false;
        for (size_t q = k + 1; q < v.n && strcmp(v.items[ix[q]].memory_id, x->memory_id) == 0;
             q++) {
            const struct api_version *y = &v.items[ix[q]];
            tie = tie || y->created_ns == x->created_ns;
            unseen_behind = unseen_behind || !was_seen(fd, y->id);
        }
        /* Only while something of the run is new: once read and settled,
         * a tie says nothing more (no GET at every read of the overlap). */
        bool unsure = first_seen ? unseen_behind : tie;
        if (unsure) {
            redacted[n_redacted++] = x->memory_id;
            continue;
        }
        if (first_seen)
            continue;
        if (x->redacted)
            redacted[n_redacted++] = x->memory_id;
        else if (x->op == API_OP_DELETED)
            rc = add_gone(fr, x->memory_id);
        else if (!already_known(s, st, x->memory_id, x->sha, x->path))
            rc = api_list_add_version(&fr->changes, x->memory_id, x->path, x->sha, x->size,
                                      x->created_ns, x->id);
    }
    if (!rc)
        rc = settle_redacted(s, st, fr, redacted, n_redacted);
    free(redacted);
    free(ix);
    api_versions_free(&v);
    if (rc) {
        snprintf(why, whylen, "cannot read the version feed of memory store %s: %s", st->id,
                 strerror(-rc));
        feed_read_free(fr);
    } else {
        fr->ok = true;
    }
    return rc;
}

void feed_commit(struct sstore *st, struct feed_read *fr)
{
    struct feed *fd = &st->feed;
    free(fd->seen);
    fd->seen = fr->seen;
    fd->n_seen = fr->n_seen;
    fr->seen = NULL;
    fr->n_seen = 0;
    if (fd->n_seen > 1)
        qsort(fd->seen, fd->n_seen, sizeof(*fd->seen), cmp_seen);
    fd->mark_ns = fr->mark_ns;
    fd->failures = 0;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    fd->last_read_s = (int64_t)t.tv_sec;
}

int feed_head(struct syncer *s, struct sstore *st, struct feed_read *head)
{
    memset(head, 0, sizeof(*head));
    if (st->feed.unsupported)
        return 0;
    struct api_versions v = {0};
    struct api_error e = {0};
    int rc = api_versions_since(s->h, st->id, NULL, 1, 1, &v, &e);
    if (rc == -ENOENT && e.status == 404) {
        st->feed.unsupported = true;
        log_warn("the server has no version feed; every sync lists the whole store",
                 "memory_store_id", st->id);
    }
    api_error_clear(&e);
    if (rc || v.n_bad) {
        api_versions_free(&v);
        return rc ? rc : -EPROTO;
    }
    head->ok = true;
    head->mark_ns = v.server_ns;
    if (v.n) {
        if (v.items[0].created_ns > head->mark_ns)
            head->mark_ns = v.items[0].created_ns;
        head->seen = calloc(1, sizeof(*head->seen));
        if (head->seen) {
            snprintf(head->seen[0].id, sizeof(head->seen[0].id), "%s", v.items[0].id);
            head->seen[0].at_ns = v.items[0].created_ns;
            head->n_seen = 1;
        }
    }
    api_versions_free(&v);
    return 0;
}

bool feed_usable(const struct syncer *s, const struct sstore *st, int64_t now_s)
{
    const struct feed *fd = &st->feed;
    if (!fd->ready || fd->unsupported || fd->want_full)
        return false;
    return s->o.full_resync_s <= 0 || now_s - fd->last_full_s < s->o.full_resync_s;
}

/* extra: memories the feed named that the cache has not taken: the ones
 * the changes settle (deleted, or changed again), or that the cache has
 * taken since, leave it. */
static void extra_settle(struct syncer *s, struct sstore *st, char **ids, size_t n)
{
    struct feed *fd = &st->feed;
    struct api_list keep = {0};
    for (size_t i = 0; i < fd->extra.n; i++) {
        const struct api_memory *m = &fd->extra.items[i];
        if (!in_ids(ids, n, m->id) && !cache_memory_known(s->c, st->id, m->id))
            api_list_add(&keep, m->id, m->path, m->sha, m->size, m->updated_ns);
    }
    api_list_free(&fd->extra);
    fd->extra = keep;
}

int feed_view(struct syncer *s, struct sstore *st, struct feed_read *fr, struct api_list *view)
{
    memset(view, 0, sizeof(*view));
    size_t n_ids = 0;
    char **ids = changed_ids(fr, &n_ids);
    if (!ids)
        return -ENOMEM;
    extra_settle(s, st, ids, n_ids);
    struct cache_base *b = NULL;
    size_t nb = 0;
    int rc = cache_baselines(s->c, st->id, &b, &nb);
    /* The cache's view, minus what changed; then the changes, then what
     * earlier syncs could not place. */
    for (size_t i = 0; !rc && i < nb; i++)
        if (!in_ids(ids, n_ids, b[i].memory_id))
            rc = api_list_add(view, b[i].memory_id, b[i].path, b[i].sha, (long)b[i].size,
                              b[i].mtime_ns);
    free(ids);
    for (size_t j = 0; !rc && j < fr->changes.n; j++) {
        const struct api_memory *m = &fr->changes.items[j];
        rc = api_list_add_version(view, m->id, m->path, m->sha, m->size, m->updated_ns,
                                  m->version_id);
    }
    for (size_t j = 0; !rc && j < st->feed.extra.n; j++) {
        const struct api_memory *m = &st->feed.extra.items[j];
        rc = api_list_add(view, m->id, m->path, m->sha, m->size, m->updated_ns);
    }
    cache_baselines_free(b, nb);
    if (rc)
        api_list_free(view);
    return rc;
}

void feed_keep_listed_unplaced(struct syncer *s, struct sstore *st,
                               const struct cache_remote *rl, size_t nr)
{
    struct cache_base *b = NULL;
    size_t nb = 0;
    if (cache_baselines(s->c, st->id, &b, &nb))
        return; /* extra kept as it is: offered again, settled later */
    char **ids = calloc(nb + 1, sizeof(*ids));
    struct api_list keep = {0};
    int rc = ids ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i < nb; i++)
        ids[i] = b[i].memory_id;
    if (!rc && nb > 1)
        qsort(ids, nb, sizeof(*ids), cmp_str);
    /* Most of a listing is in the baselines; the rest is checked as the
     * feed's changes are (a tombstone, a node not synced back yet). */
    for (size_t i = 0; !rc && i < nr; i++)
        if (!in_ids(ids, nb, rl[i].memory_id) && !cache_memory_known(s->c, st->id, rl[i].memory_id))
            rc = api_list_add(&keep, rl[i].memory_id, rl[i].path, rl[i].sha, (long)rl[i].size,
                              rl[i].mtime_ns);
    if (!rc) {
        api_list_free(&st->feed.extra);
        st->feed.extra = keep;
    } else {
        api_list_free(&keep);
    }
    free(ids);
    cache_baselines_free(b, nb);
}
