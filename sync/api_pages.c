/* api_pages.c - list pages with content (view=full) for many prefixes at
 * once: the bulk download of engine_prefetch.
 *
 * One api_pages_next call sends the next page of every request given, all
 * in flight together (the client's max_in_flight, within its budget), and
 * parses each: 20 memories with their content a page, checked like a
 * retrieved memory (size, hash); an item that does not pass is left out
 * (the caller fetches what it still lacks one by one).  A request's
 * cursor moves on; at the last page it is done.  The caller bounds the
 * pages it asks for (a server handing out cursors for ever costs it only
 * that bound). */
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

int api_pages_next(struct http_client *c, const char *store_id, struct api_page_req *r,
                   size_t n)
{
    if (!api_id_ok(store_id))
        return -EINVAL;
    struct http_call *calls = calloc(n ? n : 1, sizeof(*calls));
    struct jbuf *paths = calloc(n ? n : 1, sizeof(*paths));
    size_t *idx = calloc(n ? n : 1, sizeof(*idx));
    size_t m = 0;
    int rc = 0;
    if (!calls || !paths || !idx) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        api_list_free(&r[i].items);
        api_error_clear(&r[i].e);
        r[i].err = 0;
        if (r[i].done)
            continue;
        if (!r[i].path_prefix || r[i].path_prefix[0] != '/') {
            r[i].err = -EINVAL;
            r[i].done = true;
            continue;
        }
        if ((rc = apip_list_path(&paths[m], store_id, true, r[i].path_prefix, r[i].depth1,
                                 r[i].cursor)))
            goto out;
        calls[m] = (struct http_call){.method = "GET", .path = paths[m].p};
        idx[m++] = i;
    }
    http_run(c, calls, m); /* each call carries its own result */
    for (size_t k = 0; k < m; k++) {
        struct api_page_req *it = &r[idx[k]];
        it->err = api_call_result(&calls[k], &it->e);
        char *next = NULL;
        if (!it->err) {
            const char *what;
            it->err = apip_memory_page_view(calls[k].resp, calls[k].resp_len, true, &it->items,
                                            &next, &what);
            if (it->err == -EPROTO)
                api_malformed(&calls[k], what, &it->e);
        }
        free(it->cursor);
        it->cursor = it->err ? NULL : next;
        if (it->err)
            free(next);
        it->pages++;
        it->done = it->err || !it->cursor;
    }
out:
    for (size_t k = 0; calls && paths && k < n; k++) {
        http_call_clear(&calls[k]);
        jbuf_release(&paths[k]);
    }
    free(calls);
    free(paths);
    free(idx);
    return rc;
}
