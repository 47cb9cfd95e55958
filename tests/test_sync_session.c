/* test_sync_session.c - the work secret, credential precedence and the
 * session file (sync/session.h).  No server needed; the env-reading tests
 * run in Criterion's per-test child process, so setenv stays local. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "session.h"

/* Base64 of s, URL-safe alphabet when url, '=' padding when pad. */
static char *b64(const char *s, size_t n, bool url, bool pad)
{
    const char *alpha = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                            : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + 8);
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)s[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)s[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)s[i + 2];
        o[k++] = alpha[(v >> 18) & 63];
        o[k++] = alpha[(v >> 12) & 63];
        if (i + 1 < n)
            o[k++] = alpha[(v >> 6) & 63];
        else if (pad)
            o[k++] = '=';
        if (i + 2 < n)
            o[k++] = alpha[v & 63];
        else if (pad)
            o[k++] = '=';
    }
    o[k] = '\0';
    return o;
}

static char *secret_for(const char *json, bool url, bool pad)
{
    return b64(json, strlen(json), url, pad);
}

Test(secret, padded_and_unpadded)
{
    /* 36 bytes, 37 and 38: no padding, "=" and "==" in the padded form. */
    const char *jsons[] = {"{\"sessions_token\":\"sk-ant-req-abcd\"}",
                           "{\"sessions_token\":\"sk-ant-req-abcde\"}",
                           "{\"sessions_token\":\"sk-ant-req-abcdef\"}"};
    const char *want[] = {"sk-ant-req-abcd", "sk-ant-req-abcde", "sk-ant-req-abcdef"};
    for (int i = 0; i < 3; i++) {
        for (int pad = 0; pad < 2; pad++) {
            char *sec = secret_for(jsons[i], true, pad);
            char *tok = NULL;
            cr_assert_eq(work_secret_token(sec, &tok), 0, "%s", sec);
            cr_assert_str_eq(tok, want[i]);
            free(tok);
            free(sec);
        }
    }
}

Test(secret, url_safe_characters)
{
    /* Bytes chosen so the encoding holds both '-' and '_'. */
    const char *json = "{\"sessions_token\":\"t>>>???~~~\",\"api_base_url\":\"x\"}";
    char *sec = secret_for(json, true, false);
    cr_assert(strchr(sec, '-') && strchr(sec, '_'), "test precondition: %s", sec);
    char *tok = NULL;
    cr_assert_eq(work_secret_token(sec, &tok), 0);
    cr_assert_str_eq(tok, "t>>>???~~~");
    free(tok);
    free(sec);
    /* The standard alphabet is accepted too. */
    sec = secret_for(json, false, true);
    cr_assert_eq(work_secret_token(sec, &tok), 0);
    cr_assert_str_eq(tok, "t>>>???~~~");
    free(tok);
    free(sec);
}

Test(secret, garbage_and_missing_token)
{
    char *tok = (char *)"untouched";
    const char *bad_raw[] = {"", "!!!!", "a", "abc$def", "=====", "YQ=x"};
    for (size_t i = 0; i < sizeof(bad_raw) / sizeof(bad_raw[0]); i++) {
        cr_assert_eq(work_secret_token(bad_raw[i], &tok), -EINVAL, "%s", bad_raw[i]);
        cr_assert_null(tok);
    }
    const char *bad_json[] = {"not json", "[\"sessions_token\"]", "{\"sessions_token\":\"\"}",
                              "{\"sessions_token\":5}", "{\"token\":\"x\"}",
                              "{\"sessions_token\":null}"};
    for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i++) {
        char *sec = secret_for(bad_json[i], true, false);
        cr_assert_eq(work_secret_token(sec, &tok), -EINVAL, "%s", bad_json[i]);
        cr_assert_null(tok);
        free(sec);
    }
}

/* cJSON's allocations, plain malloc blocks whose sizes are kept aside,
 * so that a free can look at what it frees: whether it still holds the
 * marker (after a NUL too: the secret's fields may hold "\u0000"). */
static const char marker[] = "OTHER-SECRET-4242";
static int freed_with_marker;
static struct {
    void *p;
    size_t n;
} blocks[256];

static void *sized_malloc(size_t n)
{
    void *p = malloc(n);
    for (size_t i = 0; p && i < sizeof(blocks) / sizeof(blocks[0]); i++)
        if (!blocks[i].p) {
            blocks[i].p = p;
            blocks[i].n = n;
            return p;
        }
    cr_assert_fail("more blocks than the test keeps");
    return NULL;
}

static void sized_free(void *q)
{
    for (size_t i = 0; q && i < sizeof(blocks) / sizeof(blocks[0]); i++)
        if (blocks[i].p == q) {
            if (memmem(q, blocks[i].n, marker, sizeof(marker) - 1))
                freed_with_marker++;
            blocks[i].p = NULL;
        }
    free(q);
}

Test(secret, the_secret_s_other_fields_are_wiped_before_they_are_freed)
{
    cJSON_Hooks h = {.malloc_fn = sized_malloc, .free_fn = sized_free};
    cJSON_InitHooks(&h);
    const char *json = "{\"sessions_token\":\"tok-1\",\"environment_secret\":"
                       "\"OTHER-SECRET-4242\",\"n\":{\"deep\":[\"x\\u0000OTHER-SECRET-4242\", 7]}}";
    char *sec = secret_for(json, true, false);
    char *tok = NULL;
    cr_assert_eq(work_secret_token(sec, &tok), 0);
    cr_assert_str_eq(tok, "tok-1");
    cJSON_InitHooks(NULL);
    cr_assert_eq(freed_with_marker, 0, "%d of cJSON's blocks were freed holding a field",
                 freed_with_marker);
    /* The check sees a block that holds it: one parsed and freed as is. */
    cJSON_InitHooks(&h);
    cJSON_Delete(cJSON_Parse(json));
    cJSON_InitHooks(NULL);
    cr_assert_eq(freed_with_marker, 2);
    free(tok);
    free(sec);
}

static char logbuf[8192];

static void capture_log(void)
{
    FILE *f = fmemopen(logbuf, sizeof(logbuf), "w");
    setvbuf(f, NULL, _IONBF, 0);
    log_set_stream(f);
}

Test(cred, secret_wins, .init = capture_log)
{
    char *sec = secret_for("{\"sessions_token\":\"sk-ant-req-1\"}", true, false);
    struct mfs_cred c;
    char why[256];
    cr_assert_eq(cred_resolve(sec, "key", "tok", NULL, &c, why, sizeof(why)), 0);
    cr_assert_str_eq(c.bearer, "sk-ant-req-1");
    cr_assert_null(c.api_key);
    cr_assert_str_eq(c.source, "ANTHROPIC_WORK_SECRET");
    cr_assert_str_eq(c.base_url, "https://api.anthropic.com");
    cred_clear(&c);
    cr_assert_null(c.bearer);
    free(sec);
}

Test(cred, bad_secret_falls_back_with_warning, .init = capture_log)
{
    char *sec = secret_for("{\"other\":1}", true, false);
    struct mfs_cred c;
    char why[256];
    cr_assert_eq(cred_resolve(sec, "the-key", NULL, NULL, &c, why, sizeof(why)), 0);
    cr_assert_str_eq(c.api_key, "the-key");
    cr_assert_null(c.bearer);
    cr_assert_str_eq(c.source, "ANTHROPIC_API_KEY");
    cr_assert(strstr(logbuf, "work item carried a secret payload but no sessions token could "
                             "be extracted; falling back to the environment key"),
              "log: %s", logbuf);
    cr_assert_null(strstr(logbuf, "the-key"), "credential leaked into the log");
    cred_clear(&c);
    free(sec);
}

Test(cred, precedence_key_then_token, .init = capture_log)
{
    struct mfs_cred c;
    char why[256];
    cr_assert_eq(cred_resolve(NULL, "k1", "t1", "http://127.0.0.1:9/", &c, why, sizeof(why)), 0);
    cr_assert_str_eq(c.api_key, "k1");
    cr_assert_null(c.bearer);
    cr_assert_str_eq(c.base_url, "http://127.0.0.1:9");
    cred_clear(&c);
    cr_assert_eq(cred_resolve("", "", "t1", "", &c, why, sizeof(why)), 0);
    cr_assert_null(c.api_key);
    cr_assert_str_eq(c.bearer, "t1");
    cr_assert_str_eq(c.source, "ANTHROPIC_AUTH_TOKEN");
    cr_assert_str_eq(c.base_url, "https://api.anthropic.com");
    cred_clear(&c);
}

Test(cred, nothing_usable, .init = capture_log)
{
    struct mfs_cred c;
    char why[256] = "";
    char *sec = secret_for("{}", true, false);
    cr_assert_eq(cred_resolve(sec, NULL, "", NULL, &c, why, sizeof(why)), -ENOKEY);
    cr_assert(strstr(why, "ANTHROPIC_API_KEY"), "%s", why);
    cr_assert_null(c.base_url);
    free(sec);
    cr_assert_eq(cred_resolve(NULL, "k", NULL, "ftp://x", &c, why, sizeof(why)), -EINVAL);
    cr_assert(strstr(why, "ANTHROPIC_BASE_URL"), "%s", why);
}

Test(cred, from_env, .init = capture_log)
{
    char *sec = secret_for("{\"sessions_token\":\"sk-env\"}", true, true);
    setenv("ANTHROPIC_WORK_SECRET", sec, 1);
    setenv("ANTHROPIC_API_KEY", "k", 1);
    setenv("ANTHROPIC_BASE_URL", "http://localhost:8788//", 1);
    struct mfs_cred c;
    char why[256];
    cr_assert_eq(cred_from_env(&c, why, sizeof(why)), 0);
    cr_assert_str_eq(c.bearer, "sk-env");
    cr_assert_str_eq(c.base_url, "http://localhost:8788");
    cred_clear(&c);
    unsetenv("ANTHROPIC_WORK_SECRET");
    cr_assert_eq(cred_from_env(&c, why, sizeof(why)), 0);
    cr_assert_str_eq(c.api_key, "k");
    cred_clear(&c);
    unsetenv("ANTHROPIC_API_KEY");
    unsetenv("ANTHROPIC_AUTH_TOKEN");
    cr_assert_eq(cred_from_env(&c, why, sizeof(why)), -ENOKEY);
    free(sec);
}

/* ---- session files ------------------------------------------------------ */

static int parse(const char *json, struct session_store **s, size_t *n, char *why)
{
    return session_parse(json, strlen(json), s, n, why, 256);
}

Test(session, object_form)
{
    const char *json =
        "{\"id\":\"sesn_1\",\"status\":\"running\",\"resources\":["
        "{\"type\":\"memory_store\",\"memory_store_id\":\"memstore_a\",\"access\":\"read_write\","
        "\"name\":\"User Preferences\",\"description\":\"\",\"instructions\":null,"
        "\"mount_path\":\"/mnt/memory/user-preferences\"},"
        "{\"type\":\"file\",\"id\":\"sesrsc_1\",\"file_id\":\"f\"},"
        "{\"type\":\"memory_store\",\"memory_store_id\":\"memstore_b\",\"access\":\"read_only\","
        "\"name\":\"Demo Memory\",\"mount_path\":\"/mnt/memory/demo-memory/\"},"
        "{\"type\":\"github_repository\",\"url\":\"x\"}]}";
    struct session_store *s;
    size_t n;
    char why[256];
    cr_assert_eq(parse(json, &s, &n, why), 0, "%s", why);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(s[0].id, "memstore_a");
    cr_assert_str_eq(s[0].name, "User Preferences");
    cr_assert_str_eq(s[0].mount_path, "/mnt/memory/user-preferences");
    cr_assert_not(s[0].read_only);
    cr_assert_str_eq(s[1].id, "memstore_b");
    cr_assert_str_eq(s[1].mount_path, "/mnt/memory/demo-memory");
    cr_assert(s[1].read_only);
    session_stores_free(s, n);
}

Test(session, array_form_and_defaults)
{
    const char *json =
        "[{\"type\":\"memory_store\",\"memory_store_id\":\"memstore_a\",\"name\":\"  Notes! \"},"
        "{\"type\":\"memory_store\",\"memory_store_id\":\"memstore_b\",\"access\":null,"
        "\"name\":\"notes\"},"
        "{\"type\":\"memory_store\",\"memory_store_id\":\"memstore_c\",\"name\":\"***\"}]";
    struct session_store *s;
    size_t n;
    char why[256];
    cr_assert_eq(parse(json, &s, &n, why), 0, "%s", why);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(s[0].mount_path, "/mnt/memory/notes");
    cr_assert_str_eq(s[1].mount_path, "/mnt/memory/notes-2");
    cr_assert_not(s[1].read_only);
    cr_assert_str_eq(s[2].mount_path, "/mnt/memory/memstore_c");
    session_stores_free(s, n);
    /* No memory stores at all is fine. */
    cr_assert_eq(parse("{\"resources\":[{\"type\":\"file\"}]}", &s, &n, why), 0);
    cr_assert_eq(n, 0);
    cr_assert_null(s);
}

/* A page of GET /v1/sessions/{id}/resources, as a worker may pass it. */
Test(session, resources_page_form)
{
    const char *json =
        "{\"data\":[{\"type\":\"memory_store\",\"id\":\"sesrsc_1\","
        "\"memory_store_id\":\"memstore_a\",\"access\":\"read_only\",\"name\":\"Prefs\","
        "\"mount_path\":\"/mnt/memory/prefs\"},{\"type\":\"file\",\"file_id\":\"f\"}],"
        "\"next_page\":null}";
    struct session_store *s;
    size_t n;
    char why[256];
    cr_assert_eq(parse(json, &s, &n, why), 0, "%s", why);
    cr_assert_eq(n, 1);
    cr_expect_str_eq(s[0].id, "memstore_a");
    cr_expect_str_eq(s[0].mount_path, "/mnt/memory/prefs");
    cr_expect(s[0].read_only);
    session_stores_free(s, n);
    /* An object with neither array is still refused, naming both. */
    cr_assert_eq(parse("{\"data\":{}}", &s, &n, why), -EINVAL);
    cr_expect(strstr(why, "resources") && strstr(why, "data"), "%s", why);
}

Test(session, nine_stores_refused)
{
    char json[4096] = "[";
    for (int i = 0; i < 9; i++) {
        char one[128];
        snprintf(one, sizeof(one), "%s{\"type\":\"memory_store\",\"memory_store_id\":\"memstore_%d\"}",
                 i ? "," : "", i);
        strcat(json, one);
    }
    strcat(json, "]");
    struct session_store *s;
    size_t n;
    char why[256];
    cr_assert_eq(parse(json, &s, &n, why), -EINVAL);
    cr_assert(strstr(why, "at most 8"), "%s", why);
    /* Eight are fine. */
    char *cut = strrchr(json, '{');
    cut[-1] = ']';
    cut[0] = '\0';
    cr_assert_eq(parse(json, &s, &n, why), 0, "%s", why);
    cr_assert_eq(n, 8);
    session_stores_free(s, n);
}

Test(session, refusals)
{
    struct {
        const char *json, *needle;
    } cases[] = {
        {"[{\"type\":\"memory_store\",\"memory_store_id\":\"m\",\"access\":\"write\"}]", "access"},
        {"[{\"type\":\"memory_store\",\"access\":\"read_only\"}]", "memory_store_id"},
        {"[{\"type\":\"memory_store\",\"memory_store_id\":\"\"}]", "memory_store_id"},
        {"[{\"type\":\"memory_store\",\"memory_store_id\":7}]", "memory_store_id"},
        /* An id is letters, digits, '_' and '-', as for --store: a comma
         * would add options to the mount's fsname (allow_other...). */
        {"[{\"type\":\"memory_store\",\"memory_store_id\":\"m,allow_other\"}]",
         "memory_store_id"},
        {"[{\"type\":\"memory_store\",\"memory_store_id\":\"a.b\"}]", "memory_store_id"},
        {"[{\"type\":\"memory_store\",\"memory_store_id\":\"m\",\"mount_path\":\"rel/x\"}]",
         "clean absolute"},
        {"[{\"type\":\"memory_store\",\"memory_store_id\":\"m\",\"mount_path\":\"/a/../b\"}]",
         "clean absolute"},
        {"[{\"type\":\"memory_store\",\"memory_store_id\":\"m\"},"
         "{\"type\":\"memory_store\",\"memory_store_id\":\"m\"}]", "twice"},
        {"[{\"type\":\"memory_store\",\"memory_store_id\":\"m\",\"mount_path\":\"/x\"},"
         "{\"type\":\"memory_store\",\"memory_store_id\":\"n\",\"mount_path\":\"/x\"}]", "share"},
        {"{\"id\":\"sesn_1\"}", "resources"},
        {"{\"resources\":", "JSON"},
        {"\"str\"", "session object"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct session_store *s = (struct session_store *)1;
        size_t n = 99;
        char why[256] = "";
        cr_assert_eq(parse(cases[i].json, &s, &n, why), -EINVAL, "case %zu", i);
        cr_assert(strstr(why, cases[i].needle), "case %zu: %s", i, why);
        cr_assert_null(s);
        cr_assert_eq(n, 0);
    }
}

/* A credential no HTTP header can carry (a secret copied with its
 * trailing newline) is refused with its variable named.  Before the fix
 * the mount failed with "cannot use the API endpoint '...': Invalid
 * argument", naming the endpoint.  A base URL with a user or password in
 * it is refused: it was printed wherever the endpoint is named. */
Test(cred, a_credential_with_a_line_break_or_a_url_with_a_password_is_refused,
     .init = capture_log)
{
    struct mfs_cred c;
    char why[256] = "";
    cr_assert_eq(cred_resolve(NULL, "sk-x\n", NULL, NULL, &c, why, sizeof(why)), -EINVAL);
    cr_expect(strstr(why, "ANTHROPIC_API_KEY") && strstr(why, "line break"), "%s", why);
    cr_assert_eq(cred_resolve(NULL, NULL, "tok\r\n", NULL, &c, why, sizeof(why)), -EINVAL);
    cr_expect(strstr(why, "ANTHROPIC_AUTH_TOKEN"), "%s", why);
    cr_assert_eq(cred_resolve(NULL, "k", NULL, "https://u:secret@proxy.example/", &c, why,
                              sizeof(why)),
                 -EINVAL);
    cr_expect(strstr(why, "password") && !strstr(why, "secret"), "%s", why);
    /* An @ after the host is a path's, not a user's. */
    cr_assert_eq(cred_resolve(NULL, "k", NULL, "https://proxy.example/a@b", &c, why, sizeof(why)),
                 0);
    cred_clear(&c);
}

/* A credentials file with a key is used as it is: an ANTHROPIC_WORK_SECRET
 * or ANTHROPIC_AUTH_TOKEN left in the environment does not win over it.
 * Before the fix the environment's work secret beat the file's key (the
 * precedence of its kind), and the daemon authenticated with another
 * credential than the file named. */
Test(cred, a_credentials_file_s_key_is_used_over_the_environment_s, .init = capture_log)
{
    char path[] = "/tmp/mfs-cred-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char text[] = "ANTHROPIC_API_KEY=file-key\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char *sec = secret_for("{\"sessions_token\":\"env-token\"}", true, false);
    setenv("ANTHROPIC_WORK_SECRET", sec, 1);
    setenv("ANTHROPIC_AUTH_TOKEN", "env-bearer", 1);
    setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9", 1);
    struct mfs_cred c;
    char why[256] = "";
    int rc = cred_from_file(path, &c, why, sizeof(why));
    unsetenv("ANTHROPIC_WORK_SECRET");
    unsetenv("ANTHROPIC_AUTH_TOKEN");
    unsetenv("ANTHROPIC_BASE_URL");
    unlink(path);
    free(sec);
    cr_assert_eq(rc, 0, "%s", why);
    cr_expect_str_eq(c.api_key ? c.api_key : "(none)", "file-key");
    cr_expect_null(c.bearer, "a bearer from the environment was used: %s", c.bearer);
    cr_expect_str_eq(c.base_url, "http://127.0.0.1:9", "the endpoint still comes from the environment");
    cred_clear(&c);
}
