/* api_pages.c - list pages with content (view=full) for many prefixes at
 * once: the bulk download of engine_prefetch.
 *
 * api_pages_run drives lanes, each listing one prefix page after page:
 * 20 memories with their content a page, checked like a retrieved memory
 * (size, hash); an item that does not pass is left out (the caller
 * fetches what it still lacks one by one).  A lane goes on at its own
 * pace: as soon as one of its pages has come and been parsed, the
 * caller's turn function takes it and says what the lane does next (the
 * following page, another prefix, or nothing), and that request leaves at
 * once while the other lanes' are still in flight (http_run_opts.on_done).
 * Without that, rounds in lock step waited for the slowest page of each
 * round and left the network idle while the pages of a round were parsed
 * and stored.  The caller bounds the pages it asks for (a server handing
 * out cursors for ever costs it only that bound). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "http.h"
#include "json.h"

void api_page_req_clear(struct api_page_req *r)
{
    free(r->cursor);
    r->cursor = NULL;
    api_list_free(&r->items);
    api_error_clear(&r->e);
}

struct pages_run {
    const char *store_id;
    struct api_page_req *r;
    struct http_call *calls; /* calls[k] is the request of lane idx[k] */
    struct jbuf *paths;
    size_t *idx;
    bool *sent; /* calls[k] is out, its page not yet taken */
    api_page_turn turn;
    void *arg;
};

/* Points calls[k] at the page lane r asks for now: 0, or a negative errno
 * (the lane then ends with it). */
static int aim(struct pages_run *p, size_t k)
{
    struct api_page_req *r = &p->r[p->idx[k]];
    api_list_free(&r->items);
    api_error_clear(&r->e);
    r->err = 0;
    jbuf_release(&p->paths[k]);
    if (!r->path_prefix || r->path_prefix[0] != '/')
        return -EINVAL;
    int rc = apip_list_path(&p->paths[k], p->store_id, true, r->path_prefix, r->depth1, r->cursor);
    if (rc)
        return rc;
    /* Only the in fields: the call may still hold its last answer, which
     * http_run frees as it sends the call again. */
    p->calls[k].method = "GET";
    p->calls[k].path = p->paths[k].p;
    return 0;
}

/* One page of a lane has come (or failed): parse it, hand it over, and
 * say whether the lane sends another request. */
static bool page_done(void *arg, struct http_call *call)
{
    struct pages_run *p = arg;
    size_t k = (size_t)(call - p->calls);
    struct api_page_req *r = &p->r[p->idx[k]];
    p->sent[k] = false;
    r->err = api_call_result(call, &r->e);
    char *next = NULL;
    if (!r->err) {
        const char *what;
        r->err = apip_memory_page_view(call->resp, call->resp_len, true, &r->items, &next, &what);
        if (r->err == -EPROTO)
            api_malformed(call, what, &r->e);
    }
    free(r->cursor);
    r->cursor = r->err ? NULL : next;
    if (r->err)
        free(next);
    r->pages++;
    r->done = r->err || !r->cursor;
    bool go = p->turn(p->arg, r);
    api_list_free(&r->items);
    if (!go || r->done)
        return false;
    int rc = aim(p, k);
    if (rc) {
        r->err = rc;
        r->done = true;
        return false;
    }
    p->sent[k] = true;
    return true;
}

int api_pages_run(struct http_client *c, const char *store_id, struct api_page_req *r, size_t n,
                  api_page_turn turn, void *arg)
{
    if (!api_id_ok(store_id) || !turn)
        return -EINVAL;
    size_t cap = n ? n : 1;
    struct pages_run p = {.store_id = store_id, .r = r, .turn = turn, .arg = arg};
    p.calls = calloc(cap, sizeof(*p.calls));
    p.paths = calloc(cap, sizeof(*p.paths));
    p.idx = calloc(cap, sizeof(*p.idx));
    p.sent = calloc(cap, sizeof(*p.sent));
    size_t m = 0;
    int rc = 0;
    if (!p.calls || !p.paths || !p.idx || !p.sent) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (r[i].done)
            continue;
        p.idx[m] = i;
        if ((rc = aim(&p, m))) {
            r[i].err = rc;
            r[i].done = true;
            if (rc == -ENOMEM)
                goto out;
            rc = 0;
            continue;
        }
        p.sent[m++] = true;
    }
    struct http_run_opts ro = {.on_done = page_done, .arg = &p};
    http_run_ex(c, p.calls, m, &ro);
    /* A lane whose request a cancel or the deadline ended. */
    for (size_t k = 0; k < m; k++)
        if (p.sent[k]) {
            struct api_page_req *it = &r[p.idx[k]];
            it->err = p.calls[k].err ? p.calls[k].err : -ECANCELED;
            it->done = true;
        }
out:
    for (size_t k = 0; p.calls && p.paths && k < cap; k++) {
        http_call_clear(&p.calls[k]);
        jbuf_release(&p.paths[k]);
    }
    free(p.calls);
    free(p.paths);
    free(p.idx);
    free(p.sent);
    return rc;
}
