/* fuzz_api_parse.c - libFuzzer target: the Memory Stores API answer
 * parsers of sync/api_parse.c (api_int.h) on arbitrary bodies.  The first
 * byte picks the parser; the rest is the body.  Besides memory errors and
 * undefined behaviour, it checks the promises of api_int.h: a failure
 * leaves the outputs empty, and every memory handed out has an id, a
 * version id, a path starting with '/', a 64-hex hash and a size within
 * [0, INT32_MAX] (and, with view=full, exactly that many content bytes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "sha256.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_memory(const struct api_memory *m, bool full)
{
    if (!m->id || !*m->id || !m->version_id || !*m->version_id || !m->path ||
        m->path[0] != '/' || !sha256_is_hex(m->sha) || m->size < 0 || m->size > INT32_MAX)
        abort();
    if (full && (!m->content || m->content_len != (size_t)m->size))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned which = data[0] % 6;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    const char *what = NULL;
    switch (which) {
    case 0:
    case 1: {
        struct api_memory m;
        int rc = apip_memory_doc(body, len, which == 1, &m, &what);
        if (rc == 0)
            check_memory(&m, which == 1);
        else if (m.id || m.path || m.content)
            abort();
        api_memory_clear(&m);
        break;
    }
    case 2: {
        struct api_list l = {0};
        char *next = NULL;
        int rc = apip_memory_page(body, len, &l, &next, &what);
        if (rc == 0)
            for (size_t i = 0; i < l.n; i++)
                check_memory(&l.items[i], false);
        else if (next)
            abort();
        free(next);
        api_list_free(&l);
        break;
    }
    case 3: {
        struct api_store s;
        int rc = apip_store_doc(body, len, &s, &what);
        if (rc == 0 && (!s.id || !s.name || !s.description))
            abort();
        if (rc != 0 && (s.id || s.name))
            abort();
        api_store_clear(&s);
        break;
    }
    case 4:
        (void)apip_deleted_doc(body, len, &what);
        break;
    default: {
        struct api_error e = {0};
        apip_error(409, body, len, "", &e);
        if (memchr(e.type, '\0', sizeof(e.type)) == NULL ||
            memchr(e.message, '\0', sizeof(e.message)) == NULL)
            abort();
        api_error_clear(&e);
        break;
    }
    }
    return 0;
}
