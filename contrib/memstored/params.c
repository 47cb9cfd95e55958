/* params.c - query parameters, page cursors, timestamps and key ids.
 *
 * Query values come (through struct msd_io) already percent-decoded, keys too, so
 * created_at%5Bgte%5D arrives as created_at[gte]; the encoded spelling is
 * looked up as well in case a client double-encodes.
 *
 * Cursors are "page_" + unpadded base64url of an opaque string the list
 * endpoint chooses (a path for memories, a row key for stores and versions).
 * Timestamps are canonicalised to "YYYY-MM-DDTHH:MM:SS.mmmZ" so that the
 * stored text compares in time order.  No state, no locks. */
#include "msd.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sha256.h"

const char *req_query(const struct req *rq, const char *key)
{
    if (!rq->io || !rq->io->query)
        return NULL;
    return rq->io->query(rq->io->ctx, key);
}

int q_view(const struct req *rq, struct reply *rp, bool dflt_full, bool *full)
{
    const char *v = req_query(rq, "view");
    *full = dflt_full;
    if (!v)
        return 0;
    if (strcmp(v, "full") == 0)
        *full = true;
    else if (strcmp(v, "basic") == 0)
        *full = false;
    else {
        reply_invalid(rp, "view must be basic or full");
        return -EINVAL;
    }
    return 0;
}

int q_limit(const struct req *rq, struct reply *rp, bool full, int *out)
{
    const char *v = req_query(rq, "limit");
    long n = 20;
    if (v) {
        char *end;
        errno = 0;
        n = strtol(v, &end, 10);
        if (!*v || *end || errno || n < 1 || n > 100) {
            reply_invalid(rp, "limit must be an integer from 1 to 100");
            return -EINVAL;
        }
    }
    if (full && n > 20)
        n = 20;
    *out = (int)n;
    return 0;
}

static int two(const char *s)
{
    if (!isdigit((unsigned char)s[0]) || !isdigit((unsigned char)s[1]))
        return -1;
    return (s[0] - '0') * 10 + (s[1] - '0');
}

int ts_canonical(const char *in, char out[MSD_TS_LEN])
{
    /* YYYY-MM-DD[Tt ]HH:MM:SS[.frac](Z|z|+HH:MM|-HH:MM) */
    size_t n = strlen(in);
    if (n < 20)
        return -EINVAL;
    int y1 = two(in), y2 = two(in + 2);
    int mo = two(in + 5), d = two(in + 8), h = two(in + 11), mi = two(in + 14),
        s = two(in + 17);
    if (y1 < 0 || y2 < 0 || in[4] != '-' || mo < 1 || mo > 12 || in[7] != '-' || d < 1 ||
        d > 31 || (in[10] != 'T' && in[10] != 't' && in[10] != ' ') || h < 0 || h > 23 ||
        in[13] != ':' || mi < 0 || mi > 59 || in[16] != ':' || s < 0 || s > 60)
        return -EINVAL;
    const char *p = in + 19;
    int ms = 0;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return -EINVAL;
        int digits = 0;
        while (isdigit((unsigned char)*p)) {
            if (digits < 3)
                ms = ms * 10 + (*p - '0');
            digits++, p++;
        }
        for (; digits < 3; digits++)
            ms *= 10;
    }
    long offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh = two(p + 1), om = oh >= 0 && p[3] == ':' ? two(p + 4) : -1; /* in bounds */
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return -EINVAL;
        offset = (oh * 60L + om) * 60L * (*p == '+' ? 1 : -1);
        p += 6;
    } else {
        return -EINVAL;
    }
    if (*p)
        return -EINVAL;
    struct tm tm = {0};
    tm.tm_year = y1 * 100 + y2 - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    time_t t = timegm(&tm) - offset;
    ts_format((int64_t)t * 1000 + ms, out);
    return 0;
}

int q_created_at(const struct req *rq, struct reply *rp, const char *op, char out[MSD_TS_LEN])
{
    char k1[32], k2[32];
    snprintf(k1, sizeof(k1), "created_at[%s]", op);
    snprintf(k2, sizeof(k2), "created_at%%5B%s%%5D", op);
    const char *v = req_query(rq, k1);
    if (!v)
        v = req_query(rq, k2);
    out[0] = '\0';
    if (!v)
        return 0;
    if (ts_canonical(v, out)) {
        reply_invalid(rp, "created_at[%s] must be an RFC 3339 timestamp", op);
        return -EINVAL;
    }
    return 0;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

char *cursor_encode(const char *data, size_t n)
{
    size_t cap = 5 + (n + 2) / 3 * 4 + 1;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    memcpy(out, "page_", 5);
    size_t o = 5;
    const unsigned char *s = (const unsigned char *)data;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        if (i + 1 < n)
            out[o++] = b64[(v >> 6) & 63];
        if (i + 2 < n)
            out[o++] = b64[v & 63];
    }
    out[o] = '\0';
    return out;
}

char *cursor_decode(const char *tok, size_t *n)
{
    if (strncmp(tok, "page_", 5) != 0)
        return NULL;
    tok += 5;
    size_t len = strlen(tok);
    if (len == 0 || len % 4 == 1)
        return NULL;
    char *out = malloc(len / 4 * 3 + 3);
    if (!out)
        return NULL;
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        const char *c = memchr(b64, tok[i], 64);
        if (!c || !tok[i]) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)(c - b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[o] = '\0';
    if (memchr(out, '\0', o)) {
        free(out);
        return NULL;
    }
    *n = o;
    return out;
}

void api_key_id(const char *key, char out[MSD_ID_MAX])
{
    char hex[SHA256_HEX_LEN + 1];
    sha256_hex(key, strlen(key), hex);
    snprintf(out, MSD_ID_MAX, "apikey_%.16s", hex);
}
