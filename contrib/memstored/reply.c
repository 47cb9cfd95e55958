/* reply.c - what memstored answers and how it reads request bodies.
 *
 * Owns: the error envelope of A.5 ({"type":"error","error":{...},
 * "request_id":"req_..."}), the status -> error.type table, JSON replies,
 * and the checks every JSON body passes before a handler sees it:
 *   - the raw bytes are valid UTF-8 and hold no NUL byte;
 *   - no string escapes a NUL (\u0000): cJSON would cut the string there,
 *     so content with an embedded NUL is refused rather than truncated;
 *   - the text is one JSON object with nothing after it.
 * Field getters then re-check every string with rules_utf8_valid (cJSON
 * decodes \u escapes itself) and report wrong types as clear 400s.
 *
 * No state, no locks.  A reply owns its body (reply_release frees it). */
#include "msd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"

static const char oom_body[] =
    "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"out of memory\"},"
    "\"request_id\":null}";

static void set_body(struct reply *rp, unsigned status, char *body)
{
    free(rp->body);
    rp->status = status;
    rp->body = body;
    rp->body_len = body ? strlen(body) : 0;
    if (!body) {
        rp->status = 500;
        rp->body = strdup(oom_body);
        rp->body_len = rp->body ? strlen(rp->body) : 0;
    }
}

void reply_json(struct reply *rp, unsigned status, cJSON *obj)
{
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    set_body(rp, status, s);
}

void reply_release(struct reply *rp)
{
    free(rp->body);
    rp->body = NULL;
}

const char *reply_error_type(unsigned status)
{
    switch (status) {
    case 400:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 402:
        return "billing_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 408:
    case 504:
        return "timeout_error";
    case 409:
        return "conflict_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 529:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

/* Builds the envelope; returns the inner "error" object to extend, or NULL. */
static cJSON *envelope(struct reply *rp, const char *type, const char *msg, cJSON **root)
{
    cJSON *r = cJSON_CreateObject();
    cJSON *e = cJSON_CreateObject();
    if (!r || !e) {
        cJSON_Delete(r);
        cJSON_Delete(e);
        *root = NULL;
        return NULL;
    }
    cJSON_AddStringToObject(r, "type", "error");
    cJSON_AddItemToObject(r, "error", e);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "message", msg);
    if (rp->request_id)
        cJSON_AddStringToObject(r, "request_id", rp->request_id);
    else
        cJSON_AddNullToObject(r, "request_id");
    *root = r;
    return e;
}

/* Replaces each byte of msg that does not begin a whole UTF-8 character
 * with '?': a message cuts what it quotes by bytes (an id, a path), which
 * may split a character, and an error body is JSON, UTF-8 throughout. */
static void scrub_utf8(char *msg)
{
    size_t n = strlen(msg);
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)msg[i];
        size_t k = ch < 0x80 ? 1 : ch >= 0xc2 && ch <= 0xdf ? 2 : ch >= 0xe0 && ch <= 0xef ? 3
                 : ch >= 0xf0 && ch <= 0xf4 ? 4 : 0;
        if (k == 1 || (k && i + k <= n && rules_utf8_valid(msg + i, k))) {
            i += k;
            continue;
        }
        msg[i++] = '?';
    }
}

static void verror(struct reply *rp, unsigned status, const char *type, const char *fmt,
                   va_list ap) __attribute__((format(printf, 4, 0)));
static void verror(struct reply *rp, unsigned status, const char *type, const char *fmt,
                   va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    scrub_utf8(msg);
    cJSON *root;
    envelope(rp, type ? type : reply_error_type(status), msg, &root);
    reply_json(rp, status, root);
}

void reply_error(struct reply *rp, unsigned status, const char *type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(rp, status, type, fmt, ap);
    va_end(ap);
}

void reply_invalid(struct reply *rp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(rp, 400, "invalid_request_error", fmt, ap);
    va_end(ap);
}

void reply_not_found(struct reply *rp, const char *what, const char *id)
{
    reply_error(rp, 404, "not_found_error", "%s %.80s not found", what, id);
}

void reply_path_conflict(struct reply *rp, const char *mem_id, const char *path)
{
    cJSON *root;
    cJSON *e = envelope(rp, "memory_path_conflict_error",
                        "the path equals or overlaps the path of an existing memory", &root);
    if (e) {
        cJSON_AddStringToObject(e, "conflicting_memory_id", mem_id ? mem_id : "");
        cJSON_AddStringToObject(e, "conflicting_path", path ? path : "");
    }
    reply_json(rp, 409, root);
    rp->no_retry = true;
}

void reply_precondition(struct reply *rp, const char *msg)
{
    reply_error(rp, 409, "memory_precondition_failed_error", "%s", msg);
    rp->no_retry = true;
}

void reply_errno(struct reply *rp, int rc)
{
    reply_error(rp, 500, "api_error", "internal error: %s", strerror(rc < 0 ? -rc : rc));
}

/* What the JSON text holds that cJSON would take and must not, or NULL:
 * an escaped NUL character (\u0000: cJSON would cut the string there), and
 * what JSON (RFC 8259) refuses and cJSON lets through, a raw control
 * character inside a string (it must be escaped) or a byte outside
 * strings that is neither JSON's whitespace nor printable ASCII (a
 * byte-order mark, a form feed), which the real service refuses. */
static const char *not_strict_json(const char *s, size_t n)
{
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (in_string) {
            if (ch < 0x20)
                return "the request body is not valid JSON: a string holds a control character "
                       "that is not escaped";
            if (ch == '\\') {
                /* The escaped character, whatever it is, is skipped (so
                 * "\\u0000" is not misread). */
                if (i + 5 < n && s[i + 1] == 'u' && memcmp(s + i + 2, "0000", 4) == 0)
                    return "strings must not contain NUL characters (\\u0000)";
                i++;
            } else if (ch == '"') {
                in_string = false;
            }
        } else if (ch == '"') {
            in_string = true;
        } else if ((ch < 0x20 && ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n') ||
                   ch >= 0x7f) {
            return "the request body is not valid JSON: a byte outside the strings is not JSON";
        }
    }
    return NULL;
}

int body_object(const struct req *rq, struct reply *rp, bool allow_empty, cJSON **out)
{
    *out = NULL;
    const char *s = rq->body;
    size_t n = rq->body_len;
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
        i++;
    if (i == n) {
        if (!allow_empty) {
            reply_invalid(rp, "the request body must be a JSON object");
            return -EINVAL;
        }
        *out = cJSON_CreateObject();
        if (!*out) {
            reply_errno(rp, -ENOMEM);
            return -ENOMEM;
        }
        return 0;
    }
    if (memchr(s, '\0', n)) {
        reply_invalid(rp, "the request body contains a NUL byte");
        return -EINVAL;
    }
    if (!rules_utf8_valid(s, n)) {
        reply_invalid(rp, "the request body is not valid UTF-8");
        return -EINVAL;
    }
    const char *strict = not_strict_json(s, n);
    if (strict) {
        reply_invalid(rp, "%s", strict);
        return -EINVAL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, false);
    if (!j) {
        reply_invalid(rp, "the request body is not valid JSON");
        return -EINVAL;
    }
    while (end && end < s + n && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
        end++;
    if (end && end < s + n) {
        cJSON_Delete(j);
        reply_invalid(rp, "the request body has data after the JSON value");
        return -EINVAL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        reply_invalid(rp, "the request body must be a JSON object");
        return -EINVAL;
    }
    *out = j;
    return 0;
}

int jfield_str(struct reply *rp, const cJSON *obj, const char *key, const char **out)
{
    *out = NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v) || !v->valuestring) {
        reply_invalid(rp, "%s must be a string", key);
        return -EINVAL;
    }
    if (!rules_utf8_valid(v->valuestring, strlen(v->valuestring))) {
        reply_invalid(rp, "%s is not valid UTF-8", key);
        return -EINVAL;
    }
    *out = v->valuestring;
    return 0;
}

size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xc0) != 0x80)
            n++;
    return n;
}

bool has_control_chars(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    for (; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            return true;
        /* U+0080..U+009F are C2 80..C2 9F in UTF-8. */
        if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            return true;
    }
    return false;
}
