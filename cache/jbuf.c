/* jbuf.c - the growable text buffer and the JSON string writer (jbuf.h).
 *
 * Owns no shared state: every function works on the caller's buffer, so
 * all of them are thread-safe.  The buffer is capped at JBUF_MAX bytes, far
 * above anything written with it (a 102,400-byte memory escapes to at most
 * ~615 KB), so a runaway caller gets -ENOMEM instead of eating memory. */
#include "jbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"

#define JBUF_MAX (64u << 20)

static int jbuf_reserve(struct jbuf *b, size_t extra)
{
    if (b->oom)
        return -ENOMEM;
    if (extra > JBUF_MAX || b->len + extra + 1 > JBUF_MAX) {
        b->oom = true;
        return -ENOMEM;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return -ENOMEM;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

int jbuf_add(struct jbuf *b, const void *s, size_t n)
{
    int rc = jbuf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int jbuf_adds(struct jbuf *b, const char *s)
{
    return jbuf_add(b, s, strlen(s));
}

int jbuf_addf(struct jbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(tmp)) {
        b->oom = true; /* only short fragments are formatted */
        return -ENOMEM;
    }
    return jbuf_add(b, tmp, (size_t)n);
}

int jbuf_add_json_str(struct jbuf *b, const char *s, size_t n)
{
    /* Reserve for the common case (few escapes); jbuf_add grows on. */
    if (jbuf_reserve(b, n + 2))
        return -ENOMEM;
    jbuf_add(b, "\"", 1);
    size_t run = 0; /* bytes copied verbatim, flushed in one memcpy */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        size_t k = 1;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                snprintf(u, sizeof(u), "\\u%04x", c);
                esc = u;
            } else if (c >= 0x80) {
                uint32_t cp;
                k = rules_utf8_next(s + i, n - i, &cp);
                if (!k) {
                    k = 1;
                    esc = "\\ufffd"; /* not UTF-8: no JSON text can hold it */
                }
            }
        }
        if (!esc) {
            run += k;
            i += k;
            continue;
        }
        jbuf_add(b, s + i - run, run);
        run = 0;
        jbuf_adds(b, esc);
        i += k;
    }
    jbuf_add(b, s + n - run, run);
    jbuf_add(b, "\"", 1);
    return b->oom ? -ENOMEM : 0;
}

int jbuf_add_json_cstr(struct jbuf *b, const char *s)
{
    if (!s)
        return jbuf_adds(b, "null");
    return jbuf_add_json_str(b, s, strlen(s));
}

char *jbuf_steal(struct jbuf *b)
{
    char *p = b->oom ? NULL : b->p;
    if (b->oom)
        free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->oom = false;
    return p;
}

void jbuf_release(struct jbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}
