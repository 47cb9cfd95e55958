/* json.c - sync/'s text helpers (see json.h); the buffer and the JSON
 * string writer they build on are the base library's (cache/jbuf.c).
 *
 * Owns no shared state: every function works on the caller's buffers, so
 * all of them are thread-safe.
 *
 * json_top_string exists because cJSON stores strings NUL-terminated and
 * cannot carry "\u0000": content is decoded here, byte-exact, when the
 * cJSON copy is shorter than content_size_bytes says it should be. */
#include "json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jbuf_add_pct(struct jbuf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                    (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
        if (keep) {
            jbuf_add(b, p, 1);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            jbuf_add(b, e, 3);
        }
    }
    return b->oom ? -ENOMEM : 0;
}

/* ---- exact decoding of one top-level string member ---------------------- */

struct scan {
    const char *s;
    size_t n, i;
};

static void skip_ws(struct scan *sc)
{
    while (sc->i < sc->n && (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\t' ||
                             sc->s[sc->i] == '\n' || sc->s[sc->i] == '\r'))
        sc->i++;
}

static int hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return -EPROTO;
        *v = (*v << 4) | d;
    }
    return 0;
}

static void put_utf8(struct jbuf *o, uint32_t cp)
{
    unsigned char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp, k = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xc0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3f)), k = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xe0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp & 0x3f)), k = 3;
    } else {
        u[0] = (unsigned char)(0xf0 | (cp >> 18));
        u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (unsigned char)(0x80 | (cp & 0x3f)), k = 4;
    }
    jbuf_add(o, u, k);
}

/* Decodes the string literal at sc->i (which must be '"') into o when o is
 * not NULL, else only skips it. */
static int scan_string(struct scan *sc, struct jbuf *o)
{
    if (sc->i >= sc->n || sc->s[sc->i] != '"')
        return -EPROTO;
    sc->i++;
    while (sc->i < sc->n) {
        unsigned char c = (unsigned char)sc->s[sc->i];
        if (c == '"') {
            sc->i++;
            return (o && o->oom) ? -ENOMEM : 0;
        }
        if (c < 0x20)
            return -EPROTO;
        if (c != '\\') {
            size_t start = sc->i;
            while (sc->i < sc->n && sc->s[sc->i] != '"' && sc->s[sc->i] != '\\' &&
                   (unsigned char)sc->s[sc->i] >= 0x20)
                sc->i++;
            if (o)
                jbuf_add(o, sc->s + start, sc->i - start);
            continue;
        }
        if (sc->i + 1 >= sc->n)
            return -EPROTO;
        char e = sc->s[sc->i + 1];
        sc->i += 2;
        char lit;
        switch (e) {
        case '"': lit = '"'; break;
        case '\\': lit = '\\'; break;
        case '/': lit = '/'; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (sc->i + 4 > sc->n || hex4(sc->s + sc->i, &cp))
                return -EPROTO;
            sc->i += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return -EPROTO; /* lone low surrogate */
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (sc->i + 6 > sc->n || sc->s[sc->i] != '\\' || sc->s[sc->i + 1] != 'u' ||
                    hex4(sc->s + sc->i + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return -EPROTO;
                sc->i += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (o)
                put_utf8(o, cp);
            continue;
        }
        default:
            return -EPROTO;
        }
        if (o)
            jbuf_add(o, &lit, 1);
    }
    return -EPROTO;
}

/* Skips any value; containers are walked with an explicit depth count. */
static int scan_skip_value(struct scan *sc)
{
    int depth = 0;
    for (;;) {
        skip_ws(sc);
        if (sc->i >= sc->n)
            return -EPROTO;
        char c = sc->s[sc->i];
        if (c == '"') {
            int rc = scan_string(sc, NULL);
            if (rc)
                return rc;
        } else if (c == '{' || c == '[') {
            if (++depth > 512)
                return -EPROTO;
            sc->i++;
            continue;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                return -EPROTO;
            depth--;
            sc->i++;
        } else if (c == ',' || c == ':') {
            if (depth == 0)
                return -EPROTO;
            sc->i++;
            continue;
        } else {
            size_t start = sc->i;
            while (sc->i < sc->n && strchr(",]} \t\r\n:", sc->s[sc->i]) == NULL)
                sc->i++;
            if (sc->i == start)
                return -EPROTO;
        }
        if (depth == 0)
            return 0;
    }
}

int json_top_string(const char *json, size_t len, const char *key, char **out, size_t *outlen)
{
    struct scan sc = {json, len, 0};
    struct jbuf k = {0}, v = {0};
    int rc = -EPROTO;
    *out = NULL;
    *outlen = 0;
    skip_ws(&sc);
    if (sc.i >= sc.n || sc.s[sc.i] != '{')
        goto out;
    sc.i++;
    skip_ws(&sc);
    if (sc.i < sc.n && sc.s[sc.i] == '}') {
        rc = -ENOENT;
        goto out;
    }
    for (;;) {
        skip_ws(&sc);
        k.len = 0;
        if ((rc = scan_string(&sc, &k)) != 0)
            goto out;
        skip_ws(&sc);
        if (sc.i >= sc.n || sc.s[sc.i] != ':') {
            rc = -EPROTO;
            goto out;
        }
        sc.i++;
        skip_ws(&sc);
        bool match = k.p && k.len == strlen(key) && memcmp(k.p, key, k.len) == 0;
        if (match) {
            if (sc.i < sc.n && sc.s[sc.i] == '"') {
                if ((rc = scan_string(&sc, &v)) != 0)
                    goto out;
                *outlen = v.len;
                if (!v.p && jbuf_add(&v, "", 0)) { /* "" still gets a buffer */
                    rc = -ENOMEM;
                    goto out;
                }
                *out = jbuf_steal(&v);
                rc = 0;
            } else if (sc.n - sc.i >= 4 && memcmp(sc.s + sc.i, "null", 4) == 0) {
                rc = -ENOENT;
            } else {
                rc = -EPROTO;
            }
            goto out;
        }
        if ((rc = scan_skip_value(&sc)) != 0)
            goto out;
        skip_ws(&sc);
        if (sc.i < sc.n && sc.s[sc.i] == ',') {
            sc.i++;
            continue;
        }
        rc = (sc.i < sc.n && sc.s[sc.i] == '}') ? -ENOENT : -EPROTO;
        goto out;
    }
out:
    jbuf_release(&k);
    jbuf_release(&v);
    return rc;
}

static void copy_str(char *dst, size_t dlen, const cJSON *item)
{
    if (!dlen)
        return;
    dst[0] = '\0';
    if (cJSON_IsString(item) && item->valuestring)
        snprintf(dst, dlen, "%s", item->valuestring);
}

void json_error_brief(const char *body, size_t len, char *type, size_t typelen, char *msg,
                      size_t msglen, char *rid, size_t ridlen)
{
    copy_str(type, typelen, NULL);
    copy_str(msg, msglen, NULL);
    copy_str(rid, ridlen, NULL);
    if (!body || !len)
        return;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, NULL, false);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return;
    }
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    copy_str(type, typelen, cJSON_GetObjectItemCaseSensitive(err, "type"));
    copy_str(msg, msglen, cJSON_GetObjectItemCaseSensitive(err, "message"));
    copy_str(rid, ridlen, cJSON_GetObjectItemCaseSensitive(root, "request_id"));
    cJSON_Delete(root);
}
