/* prefetch.c - downloading the content the cache lacks (engine_prefetch),
 * in the background, after a mount and after every sync that brought new
 * or changed memories.
 *
 * Two ways, cheapest first:
 *  - bulk: a top-level directory ("/notes/", or "/" for the files at the
 *    root) most of whose files lack their content is listed with
 *    view=full, 20 memories with their content a page; up to
 *    BULK_IN_FLIGHT directories page at once (api_pages_next), within the
 *    daemon's request budget.  A store of 2,000 memories in 20 directories
 *    comes down in 100 requests, 8 at a time, instead of 2,000;
 *  - one GET a memory (view=full, 32 in flight) for the rest: directories
 *    where little is missing, and whatever a page did not carry (a memory
 *    changed or deleted since, an item that did not pass the checks).
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
#define BULK_IN_FLIGHT 8

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

/* Lists the groups with their content, BULK_IN_FLIGHT at a time; stops
 * starting new ones once about max memories came (0: no bound).  The
 * memories stored go to *got. */
static void bulk(struct syncer *s, struct sstore *st, struct cache_content_group *g, size_t n,
                 size_t max, size_t *got)
{
    struct cache_missing *want = NULL;
    size_t n_want = 0;
    if (cache_missing_content(s->c, st->id, &want, &n_want) != 0)
        return;
    if (n_want > 1)
        qsort(want, n_want, sizeof(*want), cmp_sha);
    struct api_page_req slot[BULK_IN_FLIGHT];
    uint64_t bound[BULK_IN_FLIGHT];
    size_t used = 0, next = 0;
    memset(slot, 0, sizeof(slot));
    for (;;) {
        /* Fill free slots with the next directories. */
        for (size_t i = 0; i < BULK_IN_FLIGHT; i++) {
            if (slot[i].path_prefix && !slot[i].done)
                continue;
            if (slot[i].path_prefix) {
                api_page_req_clear(&slot[i]);
                memset(&slot[i], 0, sizeof(slot[i]));
                used--;
            }
            if (next < n && (!max || *got < max)) {
                slot[i].path_prefix = g[next].prefix;
                slot[i].depth1 = strcmp(g[next].prefix, "/") == 0;
                /* A server that pages for ever costs at most this. */
                bound[i] = g[next].files / 20 + 3;
                next++;
                used++;
            }
        }
        if (!used || stopping(s))
            break;
        struct api_page_req act[BULK_IN_FLIGHT];
        size_t map[BULK_IN_FLIGHT], k = 0;
        for (size_t i = 0; i < BULK_IN_FLIGHT; i++)
            if (slot[i].path_prefix && !slot[i].done) {
                act[k] = slot[i];
                map[k++] = i;
            }
        int rc = api_pages_next(s->h, st->id, act, k);
        for (size_t j = 0; j < k; j++) {
            slot[map[j]] = act[j];
            struct api_page_req *r = &slot[map[j]];
            if (rc) {
                r->done = true;
                continue;
            }
            *got += keep_page(s, &r->items, want, n_want);
            if (r->err)
                log_debug("listing content failed; fetching it one by one", "memory_store_id",
                          st->id, "path_prefix", r->path_prefix, "error", strerror(-r->err));
            if ((uint64_t)r->pages >= bound[map[j]])
                r->done = true;
        }
        if (rc)
            break;
    }
    for (size_t i = 0; i < BULK_IN_FLIGHT; i++)
        api_page_req_clear(&slot[i]);
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
    for (size_t off = 0; off < n && !stopping(s); off += PREFETCH_BATCH) {
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
    st->content_missing = failed > 0 || left;
    if (fetched && left)
        st->backlog = true;
    if (fetched) {
        char nb[32];
        snprintf(nb, sizeof(nb), "%zu", fetched);
        log_info("downloaded memories", "memory_store_id", st->id, "count", nb);
    }
    return 0;
}
