/* rules.c - validation of memory paths, segments, prefixes and content, and
 * the mount slug rule.
 *
 * A path is checked in one pass over its code points (decoded strictly here,
 * so overlong forms and encoded surrogates are refused before utf8proc sees
 * them), then once more through utf8proc's NFC to refuse non-normalised
 * input: the API compares paths byte-wise and never normalises. */
#include "rules.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Decodes one code point at s (n bytes left).  Returns its length in bytes
 * and sets *cp, or returns 0 for an invalid sequence. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

size_t rules_utf8_next(const char *s, size_t n, uint32_t *cp)
{
    return utf8_next((const unsigned char *)s, n, cp);
}

bool rules_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    while (n) {
        uint32_t cp;
        /* Fast path for ASCII. */
        if (*p < 0x80) {
            p++, n--;
            continue;
        }
        size_t k = utf8_next(p, n, &cp);
        if (!k)
            return false;
        p += k, n -= k;
    }
    return true;
}

static int fail(const char **why, const char *reason, int err)
{
    if (why)
        *why = reason;
    return err;
}

/* Checks the characters of bytes [s, s+n): strict UTF-8, no control, no
 * format (Cf), no line or paragraph separator, and NFC. */
static int check_chars(const char *s, size_t n, const char **why)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t left = n;
    bool ascii = true;

    while (left) {
        uint32_t cp;
        size_t k = utf8_next(p, left, &cp);
        if (!k)
            return fail(why, "path is not valid UTF-8", -EINVAL);
        if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
            return fail(why, "path contains a control character", -EINVAL);
        if (cp == 0x2028 || cp == 0x2029)
            return fail(why, "path contains a line or paragraph separator", -EINVAL);
        if (cp >= 0x80) {
            ascii = false;
            if (utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_CF)
                return fail(why, "path contains a Unicode format character", -EINVAL);
        }
        p += k, left -= k;
    }
    if (ascii)
        return 0;

    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0)
        return fail(why, m == UTF8PROC_ERROR_NOMEM ? "out of memory" : "path is not valid UTF-8",
                    m == UTF8PROC_ERROR_NOMEM ? -ENOMEM : -EINVAL);
    bool same = ((size_t)m == n && memcmp(nfc, s, n) == 0);
    free(nfc);
    if (!same)
        return fail(why, "path is not in Unicode NFC form", -EINVAL);
    return 0;
}

static int check_segment_n(const char *seg, size_t n, const char **why)
{
    if (n == 0)
        return fail(why, "path has an empty segment", -EINVAL);
    if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
        return fail(why, "path has a '.' or '..' segment", -EINVAL);
    return 0;
}

int rules_check_path(const char *path, size_t n, const char **why)
{
    if (!path || n == 0 || path[0] != '/')
        return fail(why, "path must start with '/'", -EINVAL);
    if (n > MEM_PATH_MAX_BYTES)
        return fail(why, "path is longer than 1024 bytes", -ENAMETOOLONG);
    if (memchr(path, '\0', n))
        return fail(why, "path contains a control character", -EINVAL);

    size_t segments = 0;
    const char *p = path + 1, *end = path + n;
    for (;;) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        const char *seg_end = slash ? slash : end;
        int rc = check_segment_n(p, (size_t)(seg_end - p), why);
        if (rc)
            return rc;
        if (++segments > MEM_PATH_MAX_SEGMENTS)
            return fail(why, "path has more than 20 segments", -EINVAL);
        if (!slash)
            break;
        p = slash + 1;
    }
    return check_chars(path, n, why);
}

int rules_check_segment(const char *name, const char **why)
{
    if (!name)
        return fail(why, "name is missing", -EINVAL);
    size_t n = strlen(name);
    if (n > MEM_PATH_MAX_BYTES - 1)
        return fail(why, "name is longer than a memory path may be", -ENAMETOOLONG);
    if (memchr(name, '/', n))
        return fail(why, "name contains '/'", -EINVAL);
    int rc = check_segment_n(name, n, why);
    if (rc)
        return rc;
    return check_chars(name, n, why);
}

int rules_check_name(const char *name, const char **why)
{
    if (name && strlen(name) > MEM_NAME_MAX_BYTES)
        return fail(why, "name is longer than 255 bytes, the longest a local file name may be",
                    -ENAMETOOLONG);
    return rules_check_segment(name, why);
}

int rules_check_local_path(const char *path, size_t n, const char **why)
{
    int rc = rules_check_path(path, n, why);
    /* The marker is a file at the root: no directory can have its name. */
    size_t m = strlen(MEM_MARKER_PATH);
    if (!rc && n > m && memcmp(path, MEM_MARKER_PATH, m) == 0 && path[m] == '/')
        rc = fail(why, "path is below " MEM_MARKER_PATH ", the memory store's marker file, "
                       "where no directory can be", -EINVAL);
    for (size_t i = 0, start = 0; !rc && i <= n; i++) {
        if (i == n || path[i] == '/') {
            if (i - start > MEM_NAME_MAX_BYTES)
                rc = fail(why, "path has a name longer than 255 bytes, which no local file "
                               "may have", -ENAMETOOLONG);
            start = i + 1;
        }
    }
    return rc;
}

int rules_check_prefix(const char *prefix, const char **why)
{
    if (!prefix)
        return fail(why, "path_prefix is missing", -EINVAL);
    size_t n = strlen(prefix);
    if (n == 0 || prefix[0] != '/')
        return fail(why, "path_prefix must start with '/'", -EINVAL);
    if (prefix[n - 1] != '/')
        return fail(why, "path_prefix must end with '/'", -EINVAL);
    if (n == 1)
        return 0;
    return rules_check_path(prefix, n - 1, why);
}

int rules_check_content(const char *s, size_t n, const char **why)
{
    if (n > MEM_CONTENT_MAX_BYTES)
        return fail(why, "content is larger than 102400 bytes", -EFBIG);
    if (!rules_utf8_valid(s, n))
        return fail(why, "content is not valid UTF-8", -EILSEQ);
    if (memchr(s, '\0', n))
        return fail(why, "content holds a NUL byte, which the API refuses", -EILSEQ);
    return 0;
}

char *rules_slug(const char *name, const char *fallback)
{
    size_t n = name ? strlen(name) : 0;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    bool pending_dash = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum) {
            pending_dash = true;
            continue;
        }
        if (pending_dash && o > 0)
            out[o++] = '-';
        pending_dash = false;
        out[o++] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : (char)c;
    }
    out[o] = '\0';
    if (o == 0) {
        free(out);
        return strdup(fallback ? fallback : "");
    }
    return out;
}

char *rules_marker_content(const char *store_id)
{
    char *out = NULL;
    if (asprintf(&out, "version 1\n%s", store_id) < 0)
        return NULL;
    return out;
}
