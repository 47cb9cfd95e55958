/* api_list.c - listing a store's memories (view=basic, 100 a page), two
 * ways:
 *  - page by page along one cursor (api_memories_list_progress), for the
 *    whole store or under one prefix;
 *  - by directory (api_memories_list_tree): the root with depth=1 gives
 *    the files at the root and one memory_prefix rollup per top-level
 *    directory, then every directory is listed along its own cursor, up
 *    to TREE_IN_FLIGHT at once.  A store of 2,000 memories in 20
 *    directories is listed in 4 round trips instead of 20.
 *
 * A listing is bounded whatever the server answers: a cursor seen before
 * in the same walk (A, B, A...) ends it as malformed, a cursor longer than
 * LIST_CURSOR_MAX too, and so does passing the memory budget
 * (api_set_list_budget; what the items and the cursors seen weigh, over
 * every directory of a tree listing) or LIST_PAGES_MAX pages a walk, each
 * with a clear error instead of paging on.
 *
 * The tree listing trusts the server with one thing more than a plain
 * listing does: that depth=1 rolls up everything deeper, as documented.
 * What it can check, it checks: a root item deeper than one level (depth
 * ignored), a rollup that is not one level below the root, a directory's
 * item outside that directory.  Any of these is -ENOTSUP, and the caller
 * lists the store page by page instead; so does it after -E2BIG, a root
 * with more than TREE_DIRS_MAX directories (a performance choice).
 *
 * State: the list budget only (set once before any thread lists).
 * Thread-safe as http_run is. */
#include "api.h"

#include "api_int.h"
#include "json.h"
#include "log.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_PAGES_MAX 100000 /* 10 M memories: a server that never ends */
#define LIST_CURSOR_MAX 4096
#define LIST_BUDGET_DEFAULT ((size_t)256 << 20)
#define TREE_IN_FLIGHT 8
/* More top-level directories than this: list page by page.  A directory
 * costs a request however little it holds, so many small ones would cost
 * more round trips than pages of 100; with at most 64 (8 rounds of 8),
 * the worst case (64 directories of one memory) is 9 round trips instead
 * of 1, and a store of big directories takes a few instead of dozens. */
#define TREE_DIRS_MAX 64

static size_t list_budget = LIST_BUDGET_DEFAULT;

void api_set_list_budget(size_t bytes)
{
    __atomic_store_n(&list_budget, bytes ? bytes : LIST_BUDGET_DEFAULT, __ATOMIC_RELAXED);
}

/* The cursors one walk has used: open addressing on an FNV-1a hash, kept
 * at most half full. */
struct seen {
    char **slot;
    size_t cap, n;
    size_t bytes; /* what the strings and the table weigh */
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* 1 when cur was seen before, 0 when it was added, -ENOMEM. */
static int seen_add(struct seen *t, const char *cur)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char **v = calloc(cap, sizeof(*v));
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->slot[i])
                continue;
            size_t j = fnv1a(t->slot[i]) & (cap - 1);
            while (v[j])
                j = (j + 1) & (cap - 1);
            v[j] = t->slot[i];
        }
        free(t->slot);
        t->bytes += (cap - t->cap) * sizeof(*v);
        t->slot = v;
        t->cap = cap;
    }
    size_t j = fnv1a(cur) & (t->cap - 1);
    for (; t->slot[j]; j = (j + 1) & (t->cap - 1))
        if (strcmp(t->slot[j], cur) == 0)
            return 1;
    if (!(t->slot[j] = strdup(cur)))
        return -ENOMEM;
    t->n++;
    t->bytes += strlen(cur) + 1;
    return 0;
}

static void seen_free(struct seen *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->slot[i]);
    free(t->slot);
    memset(t, 0, sizeof(*t));
}

/* What the items from index `from` on, and the malformed items left out
 * from index `skipped_from` on, weigh in memory (a server answering
 * nothing but bad items is held to the budget too). */
static size_t items_weight(const struct api_list *l, size_t from, size_t skipped_from)
{
    size_t w = 0;
    for (size_t i = from; i < l->n; i++) {
        const struct api_memory *m = &l->items[i];
        w += sizeof(*m) + strlen(m->id) + strlen(m->path) + strlen(m->version_id) + 3;
    }
    for (size_t i = skipped_from; i < l->n_skipped; i++) {
        const struct api_skipped *x = &l->skipped[i];
        w += sizeof(*x) + (x->id ? strlen(x->id) + 1 : 0) + (x->path ? strlen(x->path) + 1 : 0);
    }
    return w;
}

/* One walk along a cursor: the whole store (prefix NULL) or one prefix. */
struct walk {
    const char *prefix; /* borrowed */
    bool depth1;
    char *cursor; /* the next page; NULL: the first, or done */
    struct seen seen;
    int pages;
    bool done;
};

/* What a whole listing has taken so far, against its budget. */
struct tally {
    const char *store_id;
    size_t budget, weight;
};

static void walk_free(struct walk *w)
{
    free(w->cursor);
    seen_free(&w->seen);
    memset(w, 0, sizeof(*w));
}

int apip_list_path(struct jbuf *p, const char *store_id, bool full, const char *prefix,
                   bool depth1, const char *cursor)
{
    jbuf_adds(p, "/v1/memory_stores/");
    jbuf_add_pct(p, store_id);
    jbuf_adds(p, full ? "/memories?view=full&limit=20" : "/memories?view=basic&limit=100");
    if (prefix) {
        jbuf_adds(p, "&path_prefix=");
        jbuf_add_pct(p, prefix);
    }
    if (depth1)
        jbuf_adds(p, "&depth=1");
    if (cursor) {
        jbuf_adds(p, "&page=");
        jbuf_add_pct(p, cursor);
    }
    return p->oom ? -ENOMEM : 0;
}

static int walk_path(const char *store_id, const struct walk *w, struct jbuf *p)
{
    return apip_list_path(p, store_id, false, w->prefix, w->depth1, w->cursor);
}

/* Takes the answer to a walk's page: its items appended to out (rollups
 * to px when not NULL), the cursor checked and moved on.  seen_bytes: what
 * the cursors of the listing's other walks weigh. */
static int walk_take(struct walk *w, const struct http_call *call, struct api_list *out,
                     struct api_prefixes *px, struct tally *t, size_t seen_bytes,
                     struct api_error *e)
{
    int rc = api_call_result(call, e);
    char *next = NULL;
    size_t before = out->n, skipped = out->n_skipped, rollups = px ? px->n : 0;
    if (!rc) {
        const char *what;
        rc = apip_memory_page_ex(call->resp, call->resp_len, false, out, px, &next, &what);
        if (rc == -EPROTO)
            api_malformed(call, what, e);
    }
    if (!rc && next && strlen(next) > LIST_CURSOR_MAX)
        rc = api_malformed(call, "next_page is longer than 4096 bytes", e);
    if (!rc && next) {
        /* Every cursor is remembered as it is handed out: one handed out
         * again means the pages go round for ever. */
        int dup = seen_add(&w->seen, next);
        if (dup < 0)
            rc = dup;
        else if (dup)
            rc = api_malformed(call, "next_page repeats a cursor already used by this listing", e);
    }
    w->pages++;
    t->weight += items_weight(out, before, skipped);
    for (size_t i = rollups; px && i < px->n; i++)
        t->weight += sizeof(char *) + strlen(px->v[i]) + 1;
    if (!rc && t->weight + w->seen.bytes + seen_bytes > t->budget) {
        char msg[200];
        snprintf(msg, sizeof(msg), "the listing passed its memory budget of %zu MiB after "
                 "%zu memories (and %zu malformed items left out) in %d pages", t->budget >> 20,
                 out->n, out->n_skipped, w->pages);
        log_warn("memory listing too large; giving up", "memory_store_id", t->store_id,
                 "detail", msg);
        api_refuse(call, "listing_too_large", msg, e);
        rc = -EFBIG;
    }
    if (!rc && next && w->pages >= LIST_PAGES_MAX) {
        log_warn("memory listing never ends; giving up", "memory_store_id", t->store_id);
        rc = api_malformed(call, "the listing never ends: still a next_page after 100000 pages",
                           e);
    }
    free(w->cursor);
    w->cursor = rc ? NULL : next;
    if (rc)
        free(next);
    w->done = rc || !w->cursor;
    return rc;
}

/* Runs the walk to its end, page after page; progress after each page
 * (its last page is the listing's last when `last` says so). */
static int walk_all(struct http_client *c, struct walk *w, struct api_list *out,
                    struct api_prefixes *px, struct tally *t, struct api_error *e, bool last,
                    api_progress_fn progress, void *arg)
{
    int rc = 0;
    while (!rc && !w->done) {
        struct jbuf p = {0};
        if ((rc = walk_path(t->store_id, w, &p))) {
            jbuf_release(&p);
            break;
        }
        struct http_call call = {.method = "GET", .path = p.p};
        http_run(c, &call, 1);
        rc = walk_take(w, &call, out, px, t, 0, e);
        http_call_clear(&call);
        jbuf_release(&p);
        if (!rc && progress)
            progress(arg, out->n, last && w->done);
    }
    return rc;
}

int api_memories_list(struct http_client *c, const char *store_id, struct api_list *out,
                      struct api_error *e)
{
    return api_memories_list_prefix(c, store_id, NULL, out, e);
}

int api_memories_list_prefix(struct http_client *c, const char *store_id,
                             const char *path_prefix, struct api_list *out,
                             struct api_error *e)
{
    return api_memories_list_progress(c, store_id, path_prefix, out, e, NULL, NULL);
}

int api_memories_list_progress(struct http_client *c, const char *store_id,
                               const char *path_prefix, struct api_list *out,
                               struct api_error *e, api_progress_fn progress, void *arg)
{
    memset(out, 0, sizeof(*out));
    if (e)
        api_error_clear(e);
    if (!api_id_ok(store_id) || (path_prefix && (!*path_prefix || path_prefix[0] != '/')))
        return -EINVAL;
    struct walk w = {.prefix = path_prefix};
    struct tally t = {store_id, __atomic_load_n(&list_budget, __ATOMIC_RELAXED), 0};
    int rc = walk_all(c, &w, out, NULL, &t, e, true, progress, arg);
    walk_free(&w);
    if (rc)
        api_list_free(out);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The root's answer fits the tree listing: every item at the root, every
 * rollup one directory ("/name/") below it.  Sorts and dedups the rollups
 * (a server may repeat one on a later page). */
static bool root_fits(const struct api_list *out, struct api_prefixes *px)
{
    for (size_t i = 0; i < out->n; i++)
        if (strchr(out->items[i].path + 1, '/'))
            return false;
    for (size_t i = 0; i < px->n; i++) {
        const char *p = px->v[i], *slash = strchr(p + 1, '/');
        if (p[0] != '/' || !slash || slash[1] != '\0' || slash == p + 1)
            return false;
    }
    if (px->n > 1)
        qsort(px->v, px->n, sizeof(*px->v), cmp_str);
    size_t k = 0;
    for (size_t i = 0; i < px->n; i++) {
        if (k && strcmp(px->v[k - 1], px->v[i]) == 0)
            free(px->v[i]);
        else
            px->v[k++] = px->v[i];
    }
    px->n = k;
    return true;
}

/* The directories' walks, TREE_IN_FLIGHT at a time, one page each a round;
 * their items appended to out, progress after each page. */
static int walk_dirs(struct http_client *c, const struct api_prefixes *px, struct api_list *out,
                     struct tally *t, struct api_error *e, api_progress_fn progress, void *arg)
{
    struct walk w[TREE_IN_FLIGHT];
    struct http_call calls[TREE_IN_FLIGHT];
    struct jbuf paths[TREE_IN_FLIGHT];
    size_t slot_of[TREE_IN_FLIGHT], next = 0, used = 0;
    int rc = 0;
    memset(w, 0, sizeof(w));
    for (;;) {
        /* Fill the free slots with the next directories. */
        for (size_t i = 0; i < TREE_IN_FLIGHT && !rc; i++) {
            if (w[i].prefix && !w[i].done)
                continue;
            if (w[i].prefix) {
                walk_free(&w[i]);
                used--;
            }
            if (next < px->n) {
                w[i].prefix = px->v[next++];
                used++;
            }
        }
        if (rc || !used)
            break;
        size_t m = 0, seen_bytes = 0;
        for (size_t i = 0; i < TREE_IN_FLIGHT; i++) {
            if (!w[i].prefix || w[i].done)
                continue;
            seen_bytes += w[i].seen.bytes;
            memset(&paths[m], 0, sizeof(paths[m]));
            if ((rc = walk_path(t->store_id, &w[i], &paths[m]))) {
                jbuf_release(&paths[m]);
                break;
            }
            calls[m] = (struct http_call){.method = "GET", .path = paths[m].p};
            slot_of[m++] = i;
        }
        if (!rc)
            http_run(c, calls, m); /* each call carries its own result */
        for (size_t k = 0; k < m; k++) {
            struct walk *wk = &w[slot_of[k]];
            size_t before = out->n;
            if (!rc) {
                rc = walk_take(wk, &calls[k], out, NULL, t, seen_bytes - wk->seen.bytes, e);
                size_t plen = strlen(wk->prefix);
                for (size_t j = before; !rc && j < out->n; j++)
                    if (strncmp(out->items[j].path, wk->prefix, plen) != 0)
                        rc = -ENOTSUP;
                if (!rc && progress)
                    progress(arg, out->n, false);
            }
            http_call_clear(&calls[k]);
            jbuf_release(&paths[k]);
        }
    }
    for (size_t i = 0; i < TREE_IN_FLIGHT; i++)
        walk_free(&w[i]);
    return rc;
}

int api_memories_list_tree(struct http_client *c, const char *store_id, struct api_list *out,
                           struct api_error *e, api_progress_fn progress, void *arg)
{
    memset(out, 0, sizeof(*out));
    if (e)
        api_error_clear(e);
    if (!api_id_ok(store_id))
        return -EINVAL;
    struct tally t = {store_id, __atomic_load_n(&list_budget, __ATOMIC_RELAXED), 0};
    struct api_prefixes px = {0};
    struct walk root = {.prefix = "/", .depth1 = true};
    int rc = walk_all(c, &root, out, &px, &t, e, false, progress, arg);
    walk_free(&root);
    if (!rc && !root_fits(out, &px))
        rc = -ENOTSUP;
    if (!rc && px.n > TREE_DIRS_MAX)
        rc = -E2BIG;
    if (!rc && px.n)
        rc = walk_dirs(c, &px, out, &t, e, progress, arg);
    if (!rc && progress)
        progress(arg, out->n, true);
    apip_prefixes_free(&px);
    if (rc)
        api_list_free(out);
    return rc;
}
