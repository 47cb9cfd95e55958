/* session.c - credentials from the environment (with the work secret) and
 * the session file's memory-store resources (contract: session.h).
 *
 * No state; thread-safe.  Credentials are copied into malloc'd strings,
 * never logged and never written into why.  The secret's decoded bytes are
 * wiped before they are freed. */
#include "session.h"

#include "log.h"
#include "rules.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void why_set(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why_set(char *why, size_t whylen, const char *fmt, ...)
{
    if (!why || !whylen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* Base64, standard or URL-safe alphabet, padding optional, surrounding
 * blanks ignored.  *out is malloc'd and NUL-terminated. */
static int b64_decode(const char *s, char **out, size_t *outlen)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t'))
        n--;
    while (n && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t'))
        s++, n--;
    size_t pad = 0;
    while (n && s[n - 1] == '=' && pad < 2)
        n--, pad++;
    if (n == 0 || n % 4 == 1 || (pad && (n + pad) % 4 != 0))
        return -EINVAL;
    char *o = malloc(n / 4 * 3 + 3 + 1);
    if (!o)
        return -ENOMEM;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) {
            explicit_bzero(o, k);
            free(o);
            return -EINVAL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (char)((acc >> bits) & 0xff);
        }
    }
    o[k] = '\0';
    *out = o;
    *outlen = k;
    return 0;
}

/* Every string and number of tree j and its siblings wiped, keys
 * included: a work secret's other fields may be credentials as well, and
 * cJSON_Delete frees them as they are.  Strings are wiped over their
 * whole allocation (cJSON's is malloc), not to their first NUL: a "\u0000"
 * in a value ends it early. */
static void json_wipe(cJSON *j)
{
    for (; j; j = j->next) {
        json_wipe(j->child);
        if (j->valuestring)
            explicit_bzero(j->valuestring, malloc_usable_size(j->valuestring));
        if (j->string && !(j->type & cJSON_StringIsConst))
            explicit_bzero(j->string, malloc_usable_size(j->string));
        explicit_bzero(&j->valueint, sizeof(j->valueint));
        explicit_bzero(&j->valuedouble, sizeof(j->valuedouble));
    }
}

int work_secret_token(const char *secret, char **token)
{
    *token = NULL;
    if (!secret || !*secret)
        return -EINVAL;
    char *raw = NULL;
    size_t rawlen = 0;
    int rc = b64_decode(secret, &raw, &rawlen);
    if (rc)
        return rc;
    cJSON *root = cJSON_ParseWithLengthOpts(raw, rawlen, NULL, false);
    explicit_bzero(raw, rawlen);
    free(raw);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "sessions_token");
    rc = -EINVAL;
    if (cJSON_IsObject(root) && cJSON_IsString(t) && t->valuestring && *t->valuestring) {
        *token = strdup(t->valuestring);
        rc = *token ? 0 : -ENOMEM;
    }
    json_wipe(root);
    cJSON_Delete(root);
    return rc;
}

void cred_clear(struct mfs_cred *c)
{
    if (!c)
        return;
    /* explicit_bzero: a memset before free may be optimised away. */
    if (c->api_key)
        explicit_bzero(c->api_key, strlen(c->api_key));
    if (c->bearer)
        explicit_bzero(c->bearer, strlen(c->bearer));
    free(c->api_key);
    free(c->bearer);
    free(c->base_url);
    memset(c, 0, sizeof(*c));
}

static bool set(const char *s)
{
    return s && *s;
}

/* Whether a credential holds a byte no HTTP header may carry (a secret
 * copied with its trailing newline, as a file or a Kubernetes secret
 * turned into a variable often gives). */
static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

int cred_resolve(const char *work_secret, const char *api_key, const char *auth_token,
                 const char *base_url, struct mfs_cred *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof(*out));
    if (why && whylen)
        why[0] = '\0';
    const char *url = set(base_url) ? base_url : MFS_DEFAULT_BASE_URL;
    if ((strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) ||
        strpbrk(url, " \t\r\n?#")) {
        why_set(why, whylen,
                "ANTHROPIC_BASE_URL must be an http:// or https:// URL without query or "
                "fragment");
        return -EINVAL;
    }
    /* A user or password in the URL would be printed wherever the
     * endpoint is named (errors, the log, status). */
    const char *host = strstr(url, "://") + 3;
    const char *host_end = host + strcspn(host, "/");
    if (memchr(host, '@', (size_t)(host_end - host))) {
        why_set(why, whylen, "ANTHROPIC_BASE_URL must not carry a user name or password");
        return -EINVAL;
    }
    const char *bad = set(api_key) && has_control(api_key)       ? "ANTHROPIC_API_KEY"
                      : set(auth_token) && has_control(auth_token) ? "ANTHROPIC_AUTH_TOKEN"
                                                                   : NULL;
    if (bad) {
        why_set(why, whylen, "%s holds a line break or another control character (a secret "
                "copied with its trailing newline?); remove it", bad);
        return -EINVAL;
    }
    int rc = -ENOMEM;
    if (!(out->base_url = strdup(url)))
        goto fail;
    size_t bl = strlen(out->base_url);
    while (bl > 8 && out->base_url[bl - 1] == '/')
        out->base_url[--bl] = '\0';

    if (set(work_secret)) {
        char *tok = NULL;
        rc = work_secret_token(work_secret, &tok);
        if (rc == -ENOMEM)
            goto fail;
        if (!rc && has_control(tok)) { /* no header can carry it */
            explicit_bzero(tok, strlen(tok));
            free(tok);
            tok = NULL;
            rc = -EINVAL;
        }
        if (!rc) {
            out->bearer = tok;
            out->source = "ANTHROPIC_WORK_SECRET";
            return 0;
        }
        log_warn("work item carried a secret payload but no sessions token could be "
                 "extracted; falling back to the environment key");
    }
    rc = -ENOMEM;
    if (set(api_key)) {
        if (set(auth_token))
            log_warn("both ANTHROPIC_API_KEY and ANTHROPIC_AUTH_TOKEN are set; using "
                     "ANTHROPIC_API_KEY");
        if (!(out->api_key = strdup(api_key)))
            goto fail;
        out->source = "ANTHROPIC_API_KEY";
        return 0;
    }
    if (set(auth_token)) {
        if (!(out->bearer = strdup(auth_token)))
            goto fail;
        out->source = "ANTHROPIC_AUTH_TOKEN";
        return 0;
    }
    rc = -ENOKEY;
    why_set(why, whylen,
            "no credential: set ANTHROPIC_WORK_SECRET (the work item's secret carrying a "
            "sessions_token), ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN; memory stores cannot "
            "be mounted without one");
fail:
    if (rc == -ENOMEM)
        why_set(why, whylen, "out of memory while reading the credentials");
    cred_clear(out);
    return rc;
}

int cred_from_env(struct mfs_cred *out, char *why, size_t whylen)
{
    return cred_resolve(getenv("ANTHROPIC_WORK_SECRET"), getenv("ANTHROPIC_API_KEY"),
                        getenv("ANTHROPIC_AUTH_TOKEN"), getenv("ANTHROPIC_BASE_URL"), out, why,
                        whylen);
}

void session_stores_free(struct session_store *s, size_t n)
{
    if (!s)
        return;
    for (size_t i = 0; i < n; i++) {
        free(s[i].id);
        free(s[i].name);
        free(s[i].mount_path);
    }
    free(s);
}

/* A clean absolute mount path: '/' first, no empty, '.' or '..' segment
 * (one trailing '/' is allowed and dropped), not the root itself.
 * Returns a malloc'd copy, or NULL with *bad set. */
static char *clean_mount_path(const char *p, bool *bad)
{
    *bad = true;
    size_t n = strlen(p);
    if (n < 2 || p[0] != '/' || n > 4096)
        return NULL;
    if (p[n - 1] == '/')
        n--;
    for (size_t i = 1, start = 1; i <= n; i++) {
        if (i < n && p[i] != '/')
            continue;
        size_t len = i - start;
        if (len == 0 || (len == 1 && p[start] == '.') ||
            (len == 2 && p[start] == '.' && p[start + 1] == '.'))
            return NULL;
        start = i + 1;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
            return NULL;
    *bad = false;
    return strndup(p, n);
}

/* Parses one memory_store resource into s. */
static int parse_store(const cJSON *r, size_t index, struct session_store *s, char *why,
                       size_t whylen)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "memory_store_id");
    /* Letters, digits, '_' and '-', as --store takes: the id goes into the
     * mount's options (fsname=memstorefs:ID), where a comma would add
     * options of its own, and into the store's lock file name. */
    if (!cJSON_IsString(id) || !id->valuestring || !*id->valuestring ||
        id->valuestring[strspn(id->valuestring, "abcdefghijklmnopqrstuvwxyz"
                                                "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")]) {
        why_set(why, whylen,
                "memory_store resource #%zu has no valid memory_store_id (a non-empty string "
                "of letters, digits, '_' and '-')", index + 1);
        return -EINVAL;
    }
    const char *sid = id->valuestring;
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(r, "access");
    if (acc && !cJSON_IsNull(acc)) {
        if (cJSON_IsString(acc) && strcmp(acc->valuestring, "read_only") == 0) {
            s->read_only = true;
        } else if (!(cJSON_IsString(acc) && strcmp(acc->valuestring, "read_write") == 0)) {
            why_set(why, whylen,
                    "memory store %.80s: access must be \"read_only\" or \"read_write\"", sid);
            return -EINVAL;
        }
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(r, "name");
    if (name && !cJSON_IsNull(name) && !cJSON_IsString(name)) {
        why_set(why, whylen, "memory store %.80s: name is not a string", sid);
        return -EINVAL;
    }
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(r, "mount_path");
    if (mp && !cJSON_IsNull(mp) && !cJSON_IsString(mp)) {
        why_set(why, whylen, "memory store %.80s: mount_path is not a string", sid);
        return -EINVAL;
    }
    s->id = strdup(sid);
    s->name = strdup(cJSON_IsString(name) && *name->valuestring ? name->valuestring : sid);
    if (!s->id || !s->name)
        return -ENOMEM;
    if (cJSON_IsString(mp)) {
        bool bad;
        s->mount_path = clean_mount_path(mp->valuestring, &bad);
        if (bad) {
            why_set(why, whylen,
                    "memory store mount_path is not a clean absolute path: \"%.200s\" "
                    "(memory_store_id=%.80s)",
                    mp->valuestring, sid);
            return -EINVAL;
        }
        return s->mount_path ? 0 : -ENOMEM;
    }
    return 0; /* mount_path filled in by assign_mount_paths */
}

static bool path_taken(const struct session_store *st, size_t n, const char *p)
{
    for (size_t i = 0; i < n; i++)
        if (st[i].mount_path && strcmp(st[i].mount_path, p) == 0)
            return true;
    return false;
}

/* Default mount paths for the stores that gave none: the slug rule, then
 * "-2", "-3"... while the path is taken by another store. */
static int assign_mount_paths(struct session_store *st, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (st[i].mount_path)
            continue;
        char *slug = rules_slug(st[i].name, st[i].id);
        if (!slug)
            return -ENOMEM;
        size_t cap = strlen(SESSION_MOUNT_ROOT) + strlen(slug) + 16;
        char *p = malloc(cap);
        if (!p) {
            free(slug);
            return -ENOMEM;
        }
        snprintf(p, cap, "%s/%s", SESSION_MOUNT_ROOT, slug);
        for (int k = 2; path_taken(st, n, p); k++)
            snprintf(p, cap, "%s/%s-%d", SESSION_MOUNT_ROOT, slug, k);
        free(slug);
        st[i].mount_path = p;
    }
    return 0;
}

int session_parse(const char *json, size_t len, struct session_store **out, size_t *n,
                  char *why, size_t whylen)
{
    *out = NULL;
    *n = 0;
    if (why && whylen)
        why[0] = '\0';
    cJSON *root = json ? cJSON_ParseWithLengthOpts(json, len, NULL, false) : NULL;
    if (!root) {
        why_set(why, whylen, "the session file is not valid JSON");
        return -EINVAL;
    }
    int rc = -EINVAL;
    struct session_store *st = NULL;
    size_t cnt = 0;
    const cJSON *res = root;
    if (cJSON_IsObject(root)) {
        /* A session object, or a page of GET /v1/sessions/{id}/resources. */
        res = cJSON_GetObjectItemCaseSensitive(root, "resources");
        if (!res)
            res = cJSON_GetObjectItemCaseSensitive(root, "data");
        if (!cJSON_IsArray(res)) {
            why_set(why, whylen, "the session object has no \"resources\" array (nor a "
                                 "resources page's \"data\" array)");
            goto out;
        }
    } else if (!cJSON_IsArray(root)) {
        why_set(why, whylen,
                "the session file must be a session object or its resources array");
        goto out;
    }
    size_t total = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, res) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(r, "type");
        if (cJSON_IsObject(r) && cJSON_IsString(type) &&
            strcmp(type->valuestring, "memory_store") == 0)
            total++;
    }
    if (total > SESSION_STORES_MAX) {
        why_set(why, whylen, "the session has %zu memory stores; at most %d can be mounted",
                total, SESSION_STORES_MAX);
        goto out;
    }
    if (total && !(st = calloc(total, sizeof(*st)))) {
        rc = -ENOMEM;
        goto out;
    }
    cJSON_ArrayForEach(r, res) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(r, "type");
        if (!cJSON_IsObject(r) || !cJSON_IsString(type) ||
            strcmp(type->valuestring, "memory_store") != 0)
            continue;
        rc = parse_store(r, cnt, &st[cnt], why, whylen);
        cnt++;
        if (rc)
            goto out;
        for (size_t k = 0; k + 1 < cnt; k++) {
            if (strcmp(st[k].id, st[cnt - 1].id) == 0) {
                why_set(why, whylen, "memory store %.80s is listed twice", st[k].id);
                rc = -EINVAL;
                goto out;
            }
            if (st[k].mount_path && st[cnt - 1].mount_path &&
                strcmp(st[k].mount_path, st[cnt - 1].mount_path) == 0) {
                why_set(why, whylen, "memory stores %.80s and %.80s share mount_path %.200s",
                        st[k].id, st[cnt - 1].id, st[k].mount_path);
                rc = -EINVAL;
                goto out;
            }
        }
    }
    rc = assign_mount_paths(st, cnt);
out:
    if (rc == -ENOMEM)
        why_set(why, whylen, "out of memory while reading the session file");
    cJSON_Delete(root);
    if (rc) {
        session_stores_free(st, cnt);
        return rc;
    }
    *out = st;
    *n = cnt;
    return 0;
}
