/* prefetch.c - downloading the content the cache lacks (engine_prefetch),
 * in the background, after a mount and after every sync that brought new
 * or changed memories.
 *
 * Two ways, cheapest first:
 *  - bulk: a top-level directory ("/notes/", or "/" for the files at the
 *    root) most of whose files lack their content is listed with
 *    view=full, 20 memories with their content a page; up to
 *    BULK_IN_FLIGHT directories page at once (api_pages_run), each at its
 *    own pace (a page is stored while the others are in flight, and its
 *    directory's next page leaves at once), within the daemon's request
 *    budget.  A store of 2,000 memories in 20 directories comes down in
 *    100 requests, 16 at a time (the official worker's fetch concurrency),
 *    instead of 2,000;
 *  - one GET a memory (view=full, batches of 32, the client's 16 in
 *    flight) for the rest: directories where little is missing, and
 *    whatever a page did not carry (a memory changed or deleted since, an
 *    item that did not pass the checks).
 * Content is stored by its hash (cache_blob_put), and only the hashes the
 * cache lacks are taken from a page (not what it has, nor what
 * --cache-max-size evicted on purpose): a memory that changed since costs
 * nothing wrong, and what is still missing after the pages is fetched one
 * by one.
 *
 * A call takes about max memories (0: all) and says, in
 * st->content_missing and st->backlog, whether any are left for the next
 * round (engine.c), so that a big store does not keep the others waiting.
 * Runs under the store's cycle_lock. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "cache.h"
#include "log.h"

#include "engine_int.h"

#define PREFETCH_BATCH 32
#define MSG_FETCH_FAILED "failed to fetch memory content"
#define BULK_MIN 20       /* a full page: fewer missing are fetched one by one */
#define BULK_IN_FLIGHT 16

static bool stopping(struct syncer *s)
{
    pthread_mutex_lock(&s->lock);
    bool stop = s->stop;
    pthread_mutex_unlock(&s->lock);
    return stop;
}

static int cmp_sha(const void *a, const void *b)
{
    return strcmp(((const struct cache_missing *)a)->sha, ((const struct cache_missing *)b)->sha);
}

/* Stores the memories of one page whose content the cache wants (want:
 * the missing content sorted by hash; content evicted on purpose is not
 * in it), in one transaction (a page holds 20); the count stored. */
static size_t keep_page(struct syncer *s, const struct api_list *items,
                        const struct cache_missing *want, size_t n_want)
{
    struct cache_blob_in v[64];
    size_t k = 0, kept = 0;
    for (size_t i = 0; i < items->n; i++) {
        const struct api_memory *m = &items->items[i];
        struct cache_missing key;
        memcpy(key.sha, m->sha, sizeof(key.sha));
        if (!m->content || !n_want || !bsearch(&key, want, n_want, sizeof(*want), cmp_sha))
            continue;
        v[k++] = (struct cache_blob_in){m->sha, m->content, m->content_len};
        if (k == sizeof(v) / sizeof(v[0])) {
            if (cache_blobs_put(s->c, v, k) == 0)
                kept += k;
            k = 0;
        }
    }
    if (k && cache_blobs_put(s->c, v, k) == 0)
        kept += k;
    return kept;
}

/* The directories worth listing with their content: most of their files
 * lack it, and at least a page's worth. */
static size_t bulk_groups(struct cache_content_group *g, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (g[i].missing >= BULK_MIN && 2 * g[i].missing >= g[i].files)
            g[k++] = g[i];
    return k;
}

struct bulk {
    struct syncer *s;
    struct sstore *st;
    const struct cache_content_group *g;
    size_t n, next;              /* the groups, and the next one to start */
    size_t max, *got;            /* stop starting groups at about max (0: none) */
    const struct cache_missing *want; /* sorted by hash */
    size_t n_want;
    struct api_page_req *lane;
    uint64_t bound[BULK_IN_FLIGHT]; /* a lane's pages at most */
};

/* Puts lane r on the next group, if one is left and wanted. */
static bool lane_start(struct bulk *b, struct api_page_req *r)
{
    if (b->next >= b->n || (b->max && *b->got >= b->max) || stopping(b->s))
        return false;
    api_page_req_clear(r);
    memset(r, 0, sizeof(*r));
    const struct cache_content_group *g = &b->g[b->next++];
    r->path_prefix = g->prefix;
    r->depth1 = strcmp(g->prefix, "/") == 0;
    /* A server that pages for ever costs at most this. */
    b->bound[r - b->lane] = g->files / 20 + 3;
    return true;
}

/* A page of lane r came: keep what the cache wants of it; go on with the
 * lane's next page, or its next group. */
static bool page_turn(void *arg, struct api_page_req *r)
{
    struct bulk *b = arg;
    if (r->err)
        log_debug("listing content failed; fetching it one by one", "memory_store_id",
                  b->st->id, "path_prefix", r->path_prefix, "error", strerror(-r->err));
    else
        *b->got += keep_page(b->s, &r->items, b->want, b->n_want);
    if (stopping(b->s))
        return false;
    if (!r->done && (uint64_t)r->pages < b->bound[r - b->lane])
        return true;
    return lane_start(b, r);
}

/* Lists the groups with their content, up to BULK_IN_FLIGHT at once, a
 * lane taking the next group as soon as its own is listed; stops starting
 * new ones once about max memories came (0: no bound).  The memories
 * stored go to *got. */
static void bulk(struct syncer *s, struct sstore *st, const struct cache_content_group *g,
                 size_t n, size_t max, size_t *got)
{
    struct cache_missing *want = NULL;
    size_t n_want = 0;
    if (cache_missing_content(s->c, st->id, &want, &n_want) != 0)
        return;
    if (n_want > 1)
        qsort(want, n_want, sizeof(*want), cmp_sha);
    struct api_page_req lane[BULK_IN_FLIGHT];
    memset(lane, 0, sizeof(lane));
    struct bulk b = {.s = s, .st = st, .g = g, .n = n, .max = max, .got = got, .want = want,
                     .n_want = n_want, .lane = lane};
    size_t k = 0;
    while (k < BULK_IN_FLIGHT && lane_start(&b, &lane[k]))
        k++;
    if (k)
        api_pages_run(s->h, st->id, lane, k, page_turn, &b);
    for (size_t i = 0; i < BULK_IN_FLIGHT; i++)
        api_page_req_clear(&lane[i]);
    free(want);
}

int engine_prefetch(struct syncer *s, int idx, size_t max)
{
    struct sstore *st = &s->v[idx];
    size_t fetched = 0, failed = 0;
    struct cache_content_group *g = NULL;
    size_t ng = 0;
    if (cache_content_groups(s->c, st->id, &g, &ng) == 0)
        bulk(s, st, g, bulk_groups(g, ng), max, &fetched);
    free(g);

    /* The rest, one GET a memory. */
    struct cache_missing *miss = NULL;
    size_t n = 0, all;
    int rc = cache_missing_content(s->c, st->id, &miss, &n);
    if (rc)
        return rc;
    all = n;
    size_t room = max ? (fetched < max ? max - fetched : 0) : n;
    if (n > room)
        n = room;
    size_t singles = 0;
    bool cancelled = false; /* the store's rounds give way (a final sync) */
    for (size_t off = 0; off < n && !cancelled && !stopping(s); off += PREFETCH_BATCH) {
        size_t m = n - off < PREFETCH_BATCH ? n - off : PREFETCH_BATCH;
        struct api_fetch f[PREFETCH_BATCH];
        memset(f, 0, sizeof(f));
        for (size_t i = 0; i < m; i++)
            f[i].memory_id = miss[off + i].memory_id;
        api_memories_fetch(s->h, st->id, f, m);
        for (size_t i = 0; i < m; i++) {
            int r = f[i].err;
            if (!r)
                r = engine_keep_fetched(s, &f[i].mem, miss[off + i].sha);
            if (!r) {
                singles++;
            } else if (r == -ECANCELED) {
                cancelled = true; /* no fault of the memory's: fetched later */
            } else if (r != -ENOENT && r != -ESTALE) {
                failed++;
                /* Each memory said once per mount with its reason: the
                 * prefetch tries again at every sync. */
                char why[400];
                if (f[i].e.status)
                    snprintf(why, sizeof(why), "HTTP %ld %s%s%s", f[i].e.status,
                             f[i].e.type[0] ? f[i].e.type : "error",
                             f[i].e.message[0] ? ": " : "", f[i].e.message);
                else
                    snprintf(why, sizeof(why), "%s", strerror(-r));
                if (engine_first_time(st, MSG_FETCH_FAILED, miss[off + i].memory_id, why))
                    log_warn(MSG_FETCH_FAILED, "memory_store_id", st->id, "memory_id",
                             miss[off + i].memory_id, "error", why);
            }
            api_memory_clear(&f[i].mem);
            api_error_clear(&f[i].e);
        }
    }
    free(miss);
    fetched += singles;
    /* Failures are retried after the next sync; what the slice left, in
     * the next round (st->backlog). */
    bool left = singles + failed < all;
    st->content_missing = failed > 0 || left; /* left counts what was cancelled */
    if (fetched && left)
        st->backlog = true;
    if (fetched) {
        char nb[32];
        snprintf(nb, sizeof(nb), "%zu", fetched);
        log_info("downloaded memories", "memory_store_id", st->id, "count", nb);
    }
    return 0;
}
