/* listing.c - the listing of a store as the sync uses it (engine_list):
 * every page of GET .../memories?view=basic, distrusted.
 *
 * The server's answer is not trusted with local files (issue 8, docs/sync.md
 * "A server that answers wrongly"):
 *  - the marker path, a path that cannot be a local file, a malformed item
 *    (api_parse.c leaves it out of its page and describes it), a second
 *    memory at one path (the first in id order is kept) and one memory at a
 *    second path (the first in path order is kept) are left out, each with
 *    one warning per mount (engine_first_time);
 *  - a memory the cache knows that is left out for any of these reasons is
 *    listed as its baseline (what the cache last knew), so this sync holds
 *    it as it is instead of taking it for deleted remotely (which would
 *    remove a clean file, or re-create a dirty one under a new id).
 * The result is sorted by path and unique by path and by id.  Runs under
 * the store's cycle_lock (or at mount, before the sync thread starts). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "engine_int.h"
#include "log.h"
#include "rules.h"

#define MSG_NOT_TREE "cannot list the store by directory; listing it page by page"

static int cmp_remote(const void *a, const void *b)
{
    return strcmp(((const struct cache_remote *)a)->path, ((const struct cache_remote *)b)->path);
}

/* A one-line reason for a failed API call. */
static void describe(char *why, size_t len, const char *what, const char *store, int rc,
                     const struct api_error *e)
{
    if (e->status)
        snprintf(why, len, "%s memory store %s: HTTP %ld %s%s%s", what, store, e->status,
                 e->type[0] ? e->type : "error", e->message[0] ? ": " : "", e->message);
    else
        snprintf(why, len, "%s memory store %s: %s", what, store, strerror(-rc));
}

/* Indices into a listing (arg), sorted by (id, path) or (path, id). */
static int cmp_id_path(const void *a, const void *b, void *arg)
{
    const struct api_list *l = arg;
    const struct api_memory *x = &l->items[*(const size_t *)a];
    const struct api_memory *y = &l->items[*(const size_t *)b];
    int c = strcmp(x->id, y->id);
    return c ? c : strcmp(x->path, y->path);
}
static int cmp_path_id(const void *a, const void *b, void *arg)
{
    const struct api_list *l = arg;
    const struct api_memory *x = &l->items[*(const size_t *)a];
    const struct api_memory *y = &l->items[*(const size_t *)b];
    int c = strcmp(x->path, y->path);
    return c ? c : strcmp(x->id, y->id);
}

static void warn_once(struct sstore *st, const char *msg, const char *id, const char *path,
                      const char *reason)
{
    if (engine_first_time(st, msg, id, path))
        log_warn(msg, "memory_store_id", st->id, "memory_id", id, "path", path, "reason", reason);
}

/* The listing being filtered: which items are kept, and the ids left out
 * that the cache knows (held at their baseline). */
struct filter {
    struct api_list *list;
    bool *keep;      /* per item of the listing as it came */
    size_t n0;
    char **held;     /* ids to hold, malloc'd each */
    size_t n_held;
};

static int hold(struct filter *f, const char *id)
{
    if (!id || !*id)
        return 0;
    char **v = realloc(f->held, (f->n_held + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    f->held = v;
    if (!(v[f->n_held] = strdup(id)))
        return -ENOMEM;
    f->n_held++;
    return 0;
}

/* Is a kept item at path, or with id? (linear: holds are rare) */
static bool kept_has(const struct filter *f, const char *id, const char *path)
{
    for (size_t i = 0; i < f->list->n; i++)
        if ((i >= f->n0 || f->keep[i]) &&
            ((id && strcmp(f->list->items[i].id, id) == 0) ||
             (path && strcmp(f->list->items[i].path, path) == 0)))
            return true;
    return false;
}

/* Marker, paths that cannot be files, duplicate ids and paths, malformed
 * items: what is left out, and what is held. */
static int filter_items(struct sstore *st, struct filter *f)
{
    struct api_list *l = f->list;
    size_t *ix = calloc(f->n0 ? f->n0 : 1, sizeof(*ix)), k = 0;
    if (!ix)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < f->n0 && !rc; i++) {
        const struct api_memory *m = &l->items[i];
        const char *reason = NULL;
        f->keep[i] = false;
        if (strcmp(m->path, MEM_MARKER_PATH) == 0) {
            warn_once(st, "the server listed the reserved marker path; skipping", m->id,
                      m->path, NULL);
        } else if (rules_check_local_path(m->path, strlen(m->path), &reason) != 0) {
            warn_once(st, "the server listed a path that cannot be a file; skipping", m->id,
                      m->path, reason);
            rc = hold(f, m->id);
        } else {
            f->keep[i] = true;
            ix[k++] = i;
        }
    }
    if (k > 1)
        qsort_r(ix, k, sizeof(*ix), cmp_id_path, l);
    for (size_t i = 1; i < k; i++)
        if (strcmp(l->items[ix[i]].id, l->items[ix[i - 1]].id) == 0) {
            f->keep[ix[i]] = false;
            warn_once(st, "the server listed one memory at two paths; keeping the first in path "
                          "order", l->items[ix[i]].id, l->items[ix[i]].path, NULL);
        }
    if (k > 1)
        qsort_r(ix, k, sizeof(*ix), cmp_path_id, l);
    const char *last = NULL;
    for (size_t i = 0; i < k && !rc; i++) {
        const struct api_memory *m = &l->items[ix[i]];
        if (!f->keep[ix[i]])
            continue;
        if (!last || strcmp(m->path, last) != 0) {
            last = m->path;
            continue;
        }
        f->keep[ix[i]] = false;
        warn_once(st, "the server listed two memories at one path; keeping the first in id "
                      "order", m->id, m->path, NULL);
        rc = hold(f, m->id);
    }
    free(ix);
    for (size_t i = 0; i < l->n_skipped && !rc; i++) {
        const struct api_skipped *x = &l->skipped[i];
        warn_once(st, "the server listed a malformed memory; leaving it out", x->id, x->path,
                  x->reason);
        rc = hold(f, x->id);
    }
    return rc;
}

/* A memory the cache knows that the listing left out stays as the cache
 * last knew it, this sync: not taken for deleted remotely (which would
 * remove a clean file or re-create a dirty one under a new id). */
static int add_held(struct syncer *s, struct sstore *st, struct filter *f)
{
    int rc = 0;
    for (size_t i = 0; i < f->n_held && !rc; i++) {
        char sha[SHA256_HEX_LEN + 1];
        char *path = NULL;
        uint64_t size = 0;
        if (kept_has(f, f->held[i], NULL) ||
            cache_baseline_of(s->c, st->id, f->held[i], sha, &path, &size) != 0)
            continue;
        if (!kept_has(f, NULL, path))
            rc = api_list_add(f->list, f->held[i], path, sha, (long)size, 0);
        free(path);
    }
    return rc;
}

struct progress_ctx {
    struct syncer *s;
    struct sstore *st;
};

static void list_progress(void *arg, size_t listed, bool last)
{
    struct progress_ctx *p = arg;
    p->s->o.progress(p->s->o.progress_arg, p->st->id, listed, last);
}

int engine_list(struct syncer *s, struct sstore *st, bool by_dir, struct api_list *list,
                struct cache_remote **out, size_t *n, char *why, size_t whylen)
{
    struct api_error e = {0};
    *out = NULL;
    *n = 0;
    struct progress_ctx pc = {s, st};
    bool report = st->progress && s->o.progress;
    int rc = -ENOTSUP;
    if (by_dir) {
        /* A server whose answers do not fit depth=1, or that refuses or
         * fails the attempt (an HTTP error after the retries), costs only
         * the attempt.  A malformed answer or a listing past its bounds
         * fails here as it would page by page. */
        rc = api_memories_list_tree(s->h, st->id, list, &e, report ? list_progress : NULL, &pc);
        if (rc == -E2BIG) {
            log_debug("many top-level directories; listing the store page by page",
                      "memory_store_id", st->id);
            rc = -ENOTSUP;
        } else if (rc == -ENOTSUP || (rc && e.status >= 400)) {
            char how[400];
            if (rc == -ENOTSUP)
                snprintf(how, sizeof(how), "its answers to depth=1 are not as documented");
            else
                describe(how, sizeof(how), "cannot list by directory", st->id, rc, &e);
            log_warn(MSG_NOT_TREE, "memory_store_id", st->id, "reason", how);
            api_error_clear(&e);
            rc = -ENOTSUP;
        }
    }
    if (rc == -ENOTSUP)
        rc = api_memories_list_progress(s->h, st->id, NULL, list, &e,
                                        report ? list_progress : NULL, &pc);
    if (rc) {
        describe(why, whylen, "cannot list", st->id, rc, &e);
        api_error_clear(&e);
        return rc;
    }
    return engine_filter(s, st, list, out, n, why, whylen);
}

/* Remembers the version each listed memory is at (user.memstore.version_id
 * of its file; cache/history.c).  Items without one (a view the feed built
 * from the cache's baselines) are skipped; a failure costs only that
 * attribute. */
static void note_versions(struct syncer *s, struct sstore *st, const struct api_list *list)
{
    struct cache_vnote *v = calloc(list->n ? list->n : 1, sizeof(*v));
    if (!v)
        return;
    for (size_t i = 0; i < list->n; i++) {
        const struct api_memory *m = &list->items[i];
        v[i] = (struct cache_vnote){m->id, m->sha, m->version_id, m->updated_ns};
    }
    cache_versions_note(s->c, st->id, v, list->n);
    free(v);
}

int engine_filter(struct syncer *s, struct sstore *st, struct api_list *list,
                  struct cache_remote **out, size_t *n, char *why, size_t whylen)
{
    *out = NULL;
    *n = 0;
    struct filter f = {.list = list, .n0 = list->n};
    f.keep = calloc(list->n ? list->n : 1, sizeof(*f.keep));
    int rc = f.keep ? filter_items(st, &f) : -ENOMEM;
    if (!rc)
        rc = add_held(s, st, &f);
    struct cache_remote *r = rc ? NULL : calloc(list->n ? list->n : 1, sizeof(*r));
    if (!rc && !r)
        rc = -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; !rc && i < list->n; i++) {
        const struct api_memory *m = &list->items[i];
        if (i < f.n0 && !f.keep[i])
            continue;
        r[k++] = (struct cache_remote){m->path, m->id, m->sha, (uint64_t)m->size,
                                       m->updated_ns};
    }
    free(f.keep);
    for (size_t i = 0; i < f.n_held; i++)
        free(f.held[i]);
    free(f.held);
    if (rc) {
        free(r);
        api_list_free(list);
        snprintf(why, whylen, "out of memory");
        return rc;
    }
    note_versions(s, st, list);
    if (k > 1)
        qsort(r, k, sizeof(*r), cmp_remote);
    *out = r;
    *n = k;
    return 0;
}
