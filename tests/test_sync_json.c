/* test_sync_json.c - sync/'s JSON text helpers and response parsing:
 * content encoding with explicit lengths (quotes, newlines, unicode,
 * control characters, NUL), exact decoding, percent-encoding, and the
 * validation of every field of the server's answers (malformed -> -EPROTO,
 * never a crash).  No server needed. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "api_int.h"
#include "json.h"
#include "sha256.h"

static char *enc(const char *s, size_t n)
{
    struct jbuf b = {0};
    cr_assert_eq(jbuf_add_json_str(&b, s, n), 0);
    return jbuf_steal(&b);
}

Test(json, encode_escapes)
{
    const char in[] = "a\"b\\c\nd\te\r\b\f\x01\x1f\x7f/é😀";
    char *out = enc(in, sizeof(in) - 1);
    cr_assert_str_eq(out, "\"a\\\"b\\\\c\\nd\\te\\r\\b\\f\\u0001\\u001f\\u007f/é😀\"");
    /* cJSON reads it back to the same bytes. */
    cJSON *v = cJSON_Parse(out);
    cr_assert(cJSON_IsString(v));
    cr_assert_str_eq(v->valuestring, in);
    cJSON_Delete(v);
    free(out);
}

Test(json, encode_nul_and_empty)
{
    char *out = enc("a\0b", 3);
    cr_assert_str_eq(out, "\"a\\u0000b\"");
    free(out);
    out = enc("", 0);
    cr_assert_str_eq(out, "\"\"");
    free(out);
}

/* Random byte strings (NUL, controls, quotes, multi-byte UTF-8) survive
 * encode -> json_top_string byte for byte. */
Test(json, roundtrip_random)
{
    static const char *const pieces[] = {"\0", "\"", "\\", "\n", "\x01", "\x7f", "é", "€",
                                         "😀", "a", "/", "\\u0000", " ", "\t", "\xe2\x80\xa8"};
    unsigned seed = 12345;
    for (int round = 0; round < 300; round++) {
        char buf[512];
        size_t n = 0;
        int k = rand_r(&seed) % 40;
        for (int i = 0; i < k; i++) {
            const char *p = pieces[rand_r(&seed) % (sizeof(pieces) / sizeof(pieces[0]))];
            size_t pl = p[0] ? strlen(p) : 1;
            memcpy(buf + n, p, pl);
            n += pl;
        }
        struct jbuf doc = {0};
        jbuf_adds(&doc, "{\"x\":[1,{\"content\":\"no\"}],\"content\":");
        jbuf_add_json_str(&doc, buf, n);
        jbuf_adds(&doc, ",\"y\":null}");
        cr_assert(!doc.oom);
        char *got = NULL;
        size_t gl = 0;
        cr_assert_eq(json_top_string(doc.p, doc.len, "content", &got, &gl), 0, "%s", doc.p);
        cr_assert_eq(gl, n, "round %d: %zu != %zu", round, gl, n);
        cr_assert(memcmp(got, buf, n) == 0);
        cr_assert_eq(got[gl], '\0');
        free(got);
        jbuf_release(&doc);
    }
}

Test(json, top_string_cases)
{
    char *s;
    size_t n;
    const char *doc = "{\"a\":{\"k\":\"inner\"},\"k\":\"x\\ud83d\\ude00y\"}";
    cr_assert_eq(json_top_string(doc, strlen(doc), "k", &s, &n), 0);
    cr_assert_str_eq(s, "x😀y");
    free(s);
    doc = "{\"a\":1}";
    cr_assert_eq(json_top_string(doc, strlen(doc), "k", &s, &n), -ENOENT);
    doc = "{\"k\":null}";
    cr_assert_eq(json_top_string(doc, strlen(doc), "k", &s, &n), -ENOENT);
    doc = "{\"k\":5}";
    cr_assert_eq(json_top_string(doc, strlen(doc), "k", &s, &n), -EPROTO);
    doc = "{\"k\":\"\\udc00\"}";
    cr_assert_eq(json_top_string(doc, strlen(doc), "k", &s, &n), -EPROTO);
    doc = "{\"k\":\"a\nb\"}"; /* raw control character */
    cr_assert_eq(json_top_string(doc, strlen(doc), "k", &s, &n), -EPROTO);
    doc = "{\"k\":\"abc";
    cr_assert_eq(json_top_string(doc, strlen(doc), "k", &s, &n), -EPROTO);
    doc = "[\"k\"]";
    cr_assert_eq(json_top_string(doc, strlen(doc), "k", &s, &n), -EPROTO);
    doc = "{\"k\":\"\"}";
    cr_assert_eq(json_top_string(doc, strlen(doc), "k", &s, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_not_null(s);
    free(s);
}

Test(json, percent_encoding)
{
    struct jbuf b = {0};
    jbuf_add_pct(&b, "a b/c?d=é&~._-Z9");
    cr_assert_str_eq(b.p, "a%20b%2Fc%3Fd%3D%C3%A9%26~._-Z9");
    jbuf_release(&b);
}

/* ---- response parsing ---------------------------------------------------- */

static char *memory_json(const char *content_json, long size, const char *sha)
{
    char *out = NULL;
    cr_assert(asprintf(&out,
                       "{\"type\":\"memory\",\"id\":\"mem_1\",\"memory_store_id\":\"memstore_1\","
                       "\"path\":\"/a.md\",\"content\":%s,\"content_sha256\":\"%s\","
                       "\"content_size_bytes\":%ld,\"memory_version_id\":\"memver_1\"}",
                       content_json, sha, size) > 0);
    return out;
}

Test(parse, memory_basic_and_full)
{
    char sha[65];
    sha256_hex("hi\n", 3, sha);
    char *doc = memory_json("null", 3, sha);
    struct api_memory m;
    const char *what = NULL;
    cr_assert_eq(apip_memory_doc(doc, strlen(doc), false, &m, &what), 0, "%s", what);
    cr_assert_str_eq(m.id, "mem_1");
    cr_assert_str_eq(m.path, "/a.md");
    cr_assert_str_eq(m.version_id, "memver_1");
    cr_assert_str_eq(m.sha, sha);
    cr_assert_eq(m.size, 3);
    cr_assert_null(m.content);
    api_memory_clear(&m);
    /* full wants content */
    cr_assert_eq(apip_memory_doc(doc, strlen(doc), true, &m, &what), -EPROTO);
    cr_assert_null(m.id);
    free(doc);

    doc = memory_json("\"hi\\n\"", 3, sha);
    cr_assert_eq(apip_memory_doc(doc, strlen(doc), true, &m, &what), 0, "%s", what);
    cr_assert_eq(m.content_len, 3);
    cr_assert_str_eq(m.content, "hi\n");
    api_memory_clear(&m);
    free(doc);
}

Test(parse, memory_content_with_nul)
{
    char sha[65];
    sha256_hex("a\0b", 3, sha);
    char *doc = memory_json("\"a\\u0000b\"", 3, sha);
    struct api_memory m;
    const char *what = NULL;
    cr_assert_eq(apip_memory_doc(doc, strlen(doc), true, &m, &what), 0, "%s", what);
    cr_assert_eq(m.content_len, 3);
    cr_assert(memcmp(m.content, "a\0b", 3) == 0);
    api_memory_clear(&m);
    free(doc);
}

/* tmpl with its one "%s" replaced by sha (no printf with a variable
 * format). */
static void subst(char *out, size_t outlen, const char *tmpl, const char *sha)
{
    const char *at = strstr(tmpl, "%s");
    cr_assert_not_null(at);
    snprintf(out, outlen, "%.*s%s%s", (int)(at - tmpl), tmpl, sha, at + 2);
}

Test(parse, memory_malformed)
{
    char sha[65];
    sha256_hex("hi", 2, sha);
    struct {
        const char *content;
        long size;
        const char *sha;
    } bad[] = {
        {"\"hi\"", 3, sha},                     /* size mismatch */
        {"\"ho\"", 2, sha},                     /* hash mismatch */
        {"\"hi\"", 2, "ABC"},                   /* not hex */
        {"42", 2, sha},                         /* content not a string */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *doc = memory_json(bad[i].content, bad[i].size, bad[i].sha);
        struct api_memory m;
        const char *what = NULL;
        cr_assert_eq(apip_memory_doc(doc, strlen(doc), true, &m, &what), -EPROTO, "case %zu", i);
        cr_assert_not_null(what);
        cr_assert_null(m.id);
        free(doc);
    }
    char upper[65];
    for (int i = 0; i < 65; i++)
        upper[i] = (char)(sha[i] >= 'a' && sha[i] <= 'f' ? sha[i] - 32 : sha[i]);
    const char *docs[] = {
        "", "not json", "[]", "{\"id\":5}", "{\"type\":\"memory\"",
        ("{\"id\":\"mem_1\",\"path\":\"/a\",\"content_sha256\":\"x\",\"content_size_bytes\":1,"
         "\"memory_version_id\":\"v\"}"),
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        struct api_memory m;
        const char *what;
        cr_assert_eq(apip_memory_doc(docs[i], strlen(docs[i]), false, &m, &what), -EPROTO,
                     "doc %zu", i);
    }
    /* Field types one by one, from a valid base. */
    const char *fmt[] = {
        "{\"id\":1,\"path\":\"/a\",\"content_sha256\":\"%s\",\"content_size_bytes\":2,\"memory_version_id\":\"v\"}",
        "{\"id\":\"m\",\"path\":\"a\",\"content_sha256\":\"%s\",\"content_size_bytes\":2,\"memory_version_id\":\"v\"}",
        "{\"id\":\"m\",\"path\":\"/a\",\"content_sha256\":\"%s\",\"content_size_bytes\":\"2\",\"memory_version_id\":\"v\"}",
        "{\"id\":\"m\",\"path\":\"/a\",\"content_sha256\":\"%s\",\"content_size_bytes\":-1,\"memory_version_id\":\"v\"}",
        "{\"id\":\"m\",\"path\":\"/a\",\"content_sha256\":\"%s\",\"content_size_bytes\":1.5,\"memory_version_id\":\"v\"}",
        "{\"id\":\"m\",\"path\":\"/a\",\"content_sha256\":\"%s\",\"content_size_bytes\":2,\"memory_version_id\":null}",
        "{\"id\":\"\",\"path\":\"/a\",\"content_sha256\":\"%s\",\"content_size_bytes\":2,\"memory_version_id\":\"v\"}",
        "{\"type\":\"memory_prefix\",\"id\":\"m\",\"path\":\"/a\",\"content_sha256\":\"%s\",\"content_size_bytes\":2,\"memory_version_id\":\"v\"}",
    };
    for (size_t i = 0; i < sizeof(fmt) / sizeof(fmt[0]); i++) {
        char doc[512];
        subst(doc, sizeof(doc), fmt[i], sha);
        struct api_memory m;
        const char *what;
        cr_assert_eq(apip_memory_doc(doc, strlen(doc), false, &m, &what), -EPROTO, "fmt %zu", i);
    }
    /* A valid base passes; the same with the hash in upper case does not. */
    const char *good = "{\"id\":\"m\",\"path\":\"/a\",\"content_sha256\":\"%s\","
                       "\"content_size_bytes\":2,\"memory_version_id\":\"v\"}";
    char doc[512];
    struct api_memory m;
    const char *what;
    subst(doc, sizeof(doc), good, sha);
    cr_assert_eq(apip_memory_doc(doc, strlen(doc), false, &m, &what), 0);
    api_memory_clear(&m);
    subst(doc, sizeof(doc), good, upper);
    cr_assert_eq(apip_memory_doc(doc, strlen(doc), false, &m, &what), -EPROTO);
}

Test(parse, page)
{
    char sha[65];
    sha256_hex("", 0, sha);
    char doc[2048];
    snprintf(doc, sizeof(doc),
             "{\"data\":[{\"type\":\"memory_prefix\",\"path\":\"/d/\"},"
             "{\"type\":\"memory\",\"id\":\"mem_a\",\"path\":\"/a\",\"content\":null,"
             "\"content_sha256\":\"%s\",\"content_size_bytes\":0,\"memory_version_id\":\"v1\"},"
             "{\"type\":\"memory\",\"id\":\"mem_b\",\"path\":\"/b\",\"content\":null,"
             "\"content_sha256\":\"%s\",\"content_size_bytes\":0,\"memory_version_id\":\"v2\"}],"
             "\"next_page\":\"page_x\"}",
             sha, sha);
    struct api_list l = {0};
    char *next = NULL;
    const char *what = NULL;
    cr_assert_eq(apip_memory_page(doc, strlen(doc), &l, &next, &what), 0, "%s", what);
    cr_assert_eq(l.n, 2);
    cr_assert_str_eq(l.items[0].id, "mem_a");
    cr_assert_str_eq(l.items[1].path, "/b");
    cr_assert_str_eq(next, "page_x");
    free(next);
    /* A second page appends; null next_page ends. */
    const char *doc2 = "{\"data\":[],\"next_page\":null}";
    cr_assert_eq(apip_memory_page(doc2, strlen(doc2), &l, &next, &what), 0);
    cr_assert_null(next);
    cr_assert_eq(l.n, 2);
    api_list_free(&l);
    cr_assert_eq(l.n, 0);

    /* A page that is not a page is refused whole. */
    const char *bad[] = {"{\"data\":{}}", "{\"data\":[],\"next_page\":5}", "[]", "not json"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct api_list l2 = {0};
        cr_assert_eq(apip_memory_page(bad[i], strlen(bad[i]), &l2, &next, &what), -EPROTO,
                     "bad %zu", i);
        api_list_free(&l2);
    }
}

/* One malformed item does not refuse its page: it is left out, described
 * (with its id and path when usable), and every other item is kept. */
Test(parse, page_with_malformed_items)
{
    char sha[65];
    sha256_hex("", 0, sha);
    char doc[4096];
    snprintf(doc, sizeof(doc),
             "{\"data\":[1,{\"id\":\"mem_untyped\"},"
             "{\"type\":\"memory\",\"id\":\"mem_rel\",\"path\":\"relative\","
             "\"content_sha256\":\"%s\",\"content_size_bytes\":0,\"memory_version_id\":\"v\"},"
             "{\"type\":\"memory\",\"id\":\"mem_neg\",\"path\":\"/neg\","
             "\"content_sha256\":\"%s\",\"content_size_bytes\":-1,\"memory_version_id\":\"v\"},"
             "{\"type\":\"memory\",\"id\":\"\",\"path\":\"/noid\","
             "\"content_sha256\":\"%s\",\"content_size_bytes\":0,\"memory_version_id\":\"v\"},"
             "{\"type\":\"memory\",\"id\":\"mem_big\",\"path\":\"/big\","
             "\"content_sha256\":\"%s\",\"content_size_bytes\":102401,\"memory_version_id\":\"v\"},"
             "{\"type\":\"memory\",\"id\":\"mem_ok\",\"path\":\"/ok\","
             "\"content_sha256\":\"%s\",\"content_size_bytes\":102400,\"memory_version_id\":\"v\"}],"
             "\"next_page\":null}",
             sha, sha, sha, sha, sha);
    struct api_list l = {0};
    char *next = NULL;
    const char *what = NULL;
    cr_assert_eq(apip_memory_page(doc, strlen(doc), &l, &next, &what), 0, "%s", what);
    cr_assert_eq(l.n, 1);
    cr_expect_str_eq(l.items[0].id, "mem_ok");
    cr_assert_eq(l.n_skipped, 6);
    cr_expect_null(l.skipped[0].id);
    cr_expect_str_eq(l.skipped[1].id, "mem_untyped");
    cr_expect_str_eq(l.skipped[2].id, "mem_rel");
    cr_expect_str_eq(l.skipped[2].path, "relative");
    cr_expect_str_eq(l.skipped[3].id, "mem_neg");
    cr_expect_null(l.skipped[4].id, "an empty id is not usable");
    cr_expect_str_eq(l.skipped[4].path, "/noid");
    cr_expect_str_eq(l.skipped[5].id, "mem_big");
    for (size_t i = 0; i < l.n_skipped; i++)
        cr_expect(l.skipped[i].reason && *l.skipped[i].reason, "item %zu has no reason", i);
    cr_expect(strstr(l.skipped[5].reason, "102400") != NULL, "%s", l.skipped[5].reason);
    api_list_free(&l);
    cr_expect_eq(l.n_skipped, 0);
}

Test(parse, store)
{
    const char *doc = "{\"type\":\"memory_store\",\"id\":\"memstore_1\",\"name\":\"N\","
                      "\"description\":\"\",\"archived_at\":null,\"metadata\":{}}";
    struct api_store s;
    const char *what = NULL;
    cr_assert_eq(apip_store_doc(doc, strlen(doc), &s, &what), 0, "%s", what);
    cr_assert_str_eq(s.id, "memstore_1");
    cr_assert_str_eq(s.name, "N");
    cr_assert_str_eq(s.description, "");
    cr_assert_not(s.archived);
    api_store_clear(&s);
    doc = "{\"id\":\"memstore_1\",\"name\":\"N\",\"archived_at\":\"2026-01-01T00:00:00Z\"}";
    cr_assert_eq(apip_store_doc(doc, strlen(doc), &s, &what), 0);
    cr_assert(s.archived);
    api_store_clear(&s);
    doc = "{\"id\":\"memstore_1\",\"name\":7}";
    cr_assert_eq(apip_store_doc(doc, strlen(doc), &s, &what), -EPROTO);
    doc = "{\"id\":\"memstore_1\",\"name\":\"n\",\"archived_at\":1}";
    cr_assert_eq(apip_store_doc(doc, strlen(doc), &s, &what), -EPROTO);
}

Test(parse, error_envelope)
{
    const char *doc = "{\"type\":\"error\",\"error\":{\"type\":\"memory_path_conflict_error\","
                      "\"message\":\"taken\",\"conflicting_memory_id\":\"mem_abc\","
                      "\"conflicting_path\":\"/notes\"},\"request_id\":\"req_9\"}";
    struct api_error e = {0};
    apip_error(409, doc, strlen(doc), "", &e);
    cr_assert_eq(e.status, 409);
    cr_assert_str_eq(e.type, "memory_path_conflict_error");
    cr_assert_str_eq(e.message, "taken");
    cr_assert_str_eq(e.conflicting_memory_id, "mem_abc");
    cr_assert_str_eq(e.conflicting_path, "/notes");
    cr_assert_str_eq(e.request_id, "req_9");
    cr_assert_eq(api_errno(e.status, e.type), -EEXIST);
    /* the header's request id wins; garbage bodies leave the fields empty */
    apip_error(502, "<html>", 6, "req_h", &e);
    cr_assert_eq(e.status, 502);
    cr_assert_str_eq(e.type, "");
    cr_assert_null(e.conflicting_path);
    cr_assert_str_eq(e.request_id, "req_h");
    api_error_clear(&e);
}

Test(parse, api_errno_table)
{
    cr_assert_eq(api_errno(409, "memory_precondition_failed_error"), -ESTALE);
    cr_assert_eq(api_errno(409, "memory_path_conflict_error"), -EEXIST);
    cr_assert_eq(api_errno(409, "conflict_error"), -EBUSY);
    cr_assert_eq(api_errno(409, ""), -EBUSY);
    cr_assert_eq(api_errno(412, NULL), -ESTALE);
    cr_assert_eq(api_errno(404, "not_found_error"), -ENOENT);
    cr_assert_eq(api_errno(400, "invalid_request_error"), -EINVAL);
    cr_assert_eq(api_errno(413, "request_too_large"), -EFBIG);
    cr_assert_eq(api_errno(401, "authentication_error"), -EACCES);
    cr_assert_eq(api_errno(403, "permission_error"), -EPERM);
    cr_assert_eq(api_errno(429, "rate_limit_error"), -EAGAIN);
    cr_assert_eq(api_errno(500, "api_error"), -EIO);
    cr_assert_eq(api_errno(200, NULL), 0);
}
