/* test_rules.c - table-driven tests of cache/rules.h (memory paths,
 * segments, list prefixes, content, strict UTF-8, mount slugs) and
 * cache/sha256.h.  Each table row carries its own label; a failing row is
 * reported by label and index, and every row is checked (cr_expect), so one
 * run shows all the rows that disagree. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "sha256.h"

struct prow {
    const char *label;
    const char *s; /* NULL: use the generated string of the row's index */
    int want;      /* 0 or a negative errno */
};

/* Builds "/" + (len - 1) x 'a' (a 1-segment path of len bytes) into a
 * malloc'd buffer. */
static char *long_path(size_t len)
{
    char *p = malloc(len + 1);
    cr_assert_not_null(p);
    p[0] = '/';
    memset(p + 1, 'a', len - 1);
    p[len] = '\0';
    return p;
}

/* "/s/s/.../s" with n segments of "s". */
static char *segments(size_t n)
{
    char *p = malloc(2 * n + 1);
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++)
        p[2 * i] = '/', p[2 * i + 1] = 's';
    p[2 * n] = '\0';
    return p;
}

static const struct prow path_rows[] = {
    {"plain", "/notes.md", 0},
    {"nested", "/projects/foo/bar.md", 0},
    {"space and colon allowed", "/my notes/a: b.md", 0},
    {"backslash and star allowed", "/a\\b*c", 0},
    {"NFC e-acute", "/caf\xc3\xa9.md", 0},
    {"NFD e + combining acute", "/cafe\xcc\x81.md", -EINVAL},
    {"emoji (4-byte) ok", "/\xf0\x9f\x98\x80.md", 0},
    {"max code point U+10FFFD (noncharacter-ish, valid UTF-8) ok", "/\xf4\x8f\xbf\xbd", 0},
    {"zero-width space U+200B", "/a\xe2\x80\x8b" "b", -EINVAL},
    {"BOM U+FEFF", "/\xef\xbb\xbf" "a", -EINVAL},
    {"word joiner U+2060", "/a\xe2\x81\xa0", -EINVAL},
    {"line separator U+2028", "/a\xe2\x80\xa8" "b", -EINVAL},
    {"paragraph separator U+2029", "/a\xe2\x80\xa9" "b", -EINVAL},
    {"tab", "/a\tb", -EINVAL},
    {"newline", "/a\nb", -EINVAL},
    {"0x01", "/a\x01", -EINVAL},
    {"DEL", "/a\x7f", -EINVAL},
    {"C1 NEL U+0085", "/a\xc2\x85" "b", -EINVAL},
    {"C1 U+009F", "/a\xc2\x9f", -EINVAL},
    {"U+00A0 nbsp is not a control", "/a\xc2\xa0" "b", 0},
    {"overlong slash 2-byte", "/a\xc0\xaf" "b", -EINVAL},
    {"overlong slash 3-byte", "/a\xe0\x80\xaf" "b", -EINVAL},
    {"overlong NUL", "/a\xc0\x80", -EINVAL},
    {"encoded high surrogate", "/a\xed\xa0\x80", -EINVAL},
    {"encoded low surrogate", "/a\xed\xbf\xbf", -EINVAL},
    {"past U+10FFFF", "/a\xf4\x90\x80\x80", -EINVAL},
    {"5-byte lead", "/a\xf8\x88\x80\x80\x80", -EINVAL},
    {"lone continuation", "/a\x80", -EINVAL},
    {"truncated 2-byte at end", "/a\xc3", -EINVAL},
    {"truncated 3-byte at end", "/a\xe2\x82", -EINVAL},
    {"truncated 4-byte mid", "/a\xf0\x9f\x98" "b", -EINVAL},
    {"0xff byte", "/a\xff", -EINVAL},
    {"trailing slash", "/a/", -EINVAL},
    {"double slash", "/a//b", -EINVAL},
    {"leading double slash", "//a", -EINVAL},
    {"dot segment", "/./a", -EINVAL},
    {"dotdot segment at end", "/a/..", -EINVAL},
    {"dotdot in the middle", "/a/../b", -EINVAL},
    {"dot at end", "/a/.", -EINVAL},
    {"three dots is a name", "/a/...", 0},
    {"dotfile is a name", "/.hidden", 0},
    {"marker name allowed", "/.anthropic-memory-store", 0},
    {"missing leading slash", "a/b", -EINVAL},
    {"slash alone", "/", -EINVAL},
    {"empty", "", -EINVAL},
    {"case is kept (upper ok)", "/A.md", 0},
};

Test(rules, check_path_table)
{
    for (size_t i = 0; i < sizeof path_rows / sizeof path_rows[0]; i++) {
        const struct prow *row = &path_rows[i];
        const char *why = NULL;
        int rc = rules_check_path(row->s, strlen(row->s), &why);
        cr_expect_eq(rc, row->want, "row %zu (%s): rules_check_path -> %d, want %d (why: %s)", i,
                     row->label, rc, row->want, why ? why : "-");
        if (rc != 0)
            cr_expect(why && *why, "row %zu (%s): no reason given", i, row->label);
    }
}

Test(rules, check_path_lengths)
{
    struct {
        size_t len;
        int want;
    } rows[] = {{2, 0}, {1023, 0}, {1024, 0}, {1025, -ENAMETOOLONG}, {4096, -ENAMETOOLONG}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char *p = long_path(rows[i].len);
        int rc = rules_check_path(p, strlen(p), NULL);
        cr_expect_eq(rc, rows[i].want, "length %zu: got %d want %d", rows[i].len, rc,
                     rows[i].want);
        free(p);
    }
    /* 1,024 bytes counted in bytes, not characters: 1 + 511 x "é" = 1023. */
    char buf[1100];
    size_t n = 0;
    buf[n++] = '/';
    for (int i = 0; i < 511; i++)
        buf[n++] = '\xc3', buf[n++] = '\xa9';
    buf[n++] = 'x'; /* 1024 bytes */
    cr_expect_eq(rules_check_path(buf, n, NULL), 0, "1024 bytes of multibyte text");
    buf[n++] = 'y'; /* 1025 */
    cr_expect_eq(rules_check_path(buf, n, NULL), -ENAMETOOLONG, "1025 bytes of multibyte text");
}

Test(rules, check_path_segment_count)
{
    for (size_t n = 1; n <= 22; n++) {
        char *p = segments(n);
        int want = n <= 20 ? 0 : -EINVAL;
        int rc = rules_check_path(p, strlen(p), NULL);
        cr_expect_eq(rc, want, "%zu segments: got %d want %d", n, rc, want);
        free(p);
    }
}

Test(rules, check_path_embedded_nul_and_length_argument)
{
    /* n is authoritative: a NUL inside the n bytes is a control char. */
    static const char p[] = "/ab\0cd";
    cr_expect_eq(rules_check_path(p, sizeof p - 1, NULL), -EINVAL);
    /* Only the first n bytes count: "/ab" of "/ab/" is fine. */
    cr_expect_eq(rules_check_path("/ab/", 3, NULL), 0);
}

static const struct prow segment_rows[] = {
    {"plain", "notes.md", 0},
    {"spaces and colon", "a b: c", 0},
    {"NFC", "caf\xc3\xa9", 0},
    {"NFD", "cafe\xcc\x81", -EINVAL},
    {"ZWSP", "a\xe2\x80\x8b", -EINVAL},
    {"FEFF", "\xef\xbb\xbf", -EINVAL},
    {"U+2028", "\xe2\x80\xa8", -EINVAL},
    {"DEL", "\x7f", -EINVAL},
    {"C1", "\xc2\x85", -EINVAL},
    {"slash", "a/b", -EINVAL},
    {"dot", ".", -EINVAL},
    {"dotdot", "..", -EINVAL},
    {"empty", "", -EINVAL},
    {"overlong", "\xc0\xaf", -EINVAL},
    {"surrogate", "\xed\xa0\x80", -EINVAL},
    {"dotfile", ".x", 0},
};

/* A path that can be a file in a mount: none below the marker (a file at
 * the root), though the marker's own name is allowed deeper down. */
Test(rules, check_local_path_below_the_marker)
{
    const char *why = NULL;
    const char *bad = "/.anthropic-memory-store/below.md";
    cr_expect_eq(rules_check_local_path(bad, strlen(bad), &why), -EINVAL);
    cr_expect(why && strstr(why, "marker"), "%s", why ? why : "(no reason)");
    const char *ok[] = {"/notes/.anthropic-memory-store", "/.anthropic-memory-store.md",
                        "/.anthropic-memory-storex/a.md", "/notes/.anthropic-memory-store/a.md"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        cr_expect_eq(rules_check_local_path(ok[i], strlen(ok[i]), &why), 0, "%s", ok[i]);
}

Test(rules, check_segment_table)
{
    for (size_t i = 0; i < sizeof segment_rows / sizeof segment_rows[0]; i++) {
        const struct prow *row = &segment_rows[i];
        const char *why = NULL;
        int rc = rules_check_segment(row->s, &why);
        cr_expect_eq(rc, row->want, "row %zu (%s): rules_check_segment -> %d, want %d (why: %s)",
                     i, row->label, rc, row->want, why ? why : "-");
    }
    /* A segment as long as a whole path can never fit under "/". */
    char *p = long_path(1024);
    cr_expect_eq(rules_check_segment(p + 1, NULL), 0, "1023-byte segment fits under '/'");
    free(p);
    p = long_path(1025);
    cr_expect_eq(rules_check_segment(p + 1, NULL), -ENAMETOOLONG, "1024-byte segment");
    free(p);
    cr_expect_eq(rules_check_segment(NULL, NULL), -EINVAL);
}

static const struct prow prefix_rows[] = {
    {"root", "/", 0},
    {"one level", "/notes/", 0},
    {"two levels", "/a/b/", 0},
    {"NFC", "/caf\xc3\xa9/", 0},
    {"no trailing slash", "/notes", -EINVAL},
    {"no leading slash", "notes/", -EINVAL},
    {"empty", "", -EINVAL},
    {"double slash", "//", -EINVAL},
    {"inner double slash", "/a//", -EINVAL},
    {"dot", "/./", -EINVAL},
    {"dotdot", "/a/../", -EINVAL},
    {"NFD", "/cafe\xcc\x81/", -EINVAL},
    {"control", "/a\x01/", -EINVAL},
    {"ZWSP", "/a\xe2\x80\x8b/", -EINVAL},
};

Test(rules, check_prefix_table)
{
    for (size_t i = 0; i < sizeof prefix_rows / sizeof prefix_rows[0]; i++) {
        const struct prow *row = &prefix_rows[i];
        int rc = rules_check_prefix(row->s, NULL);
        cr_expect_eq(rc, row->want, "row %zu (%s): rules_check_prefix(\"%s\") -> %d, want %d", i,
                     row->label, row->s, rc, row->want);
    }
    cr_expect_eq(rules_check_prefix(NULL, NULL), -EINVAL);
}

static const struct prow content_rows[] = {
    {"empty", "", 0},
    {"ascii", "hello\n", 0},
    {"controls are fine in content", "a\tb\x01\x7f", 0},
    {"NFD is fine in content", "cafe\xcc\x81", 0},
    {"ZWSP fine in content", "\xe2\x80\x8b", 0},
    {"emoji", "\xf0\x9f\x98\x80", 0},
    {"lone continuation", "a\x80", -EILSEQ},
    {"overlong", "\xc0\xaf", -EILSEQ},
    {"overlong 3-byte", "\xe0\x80\xaf", -EILSEQ},
    {"surrogate", "\xed\xa0\x80", -EILSEQ},
    {"past U+10FFFF", "\xf4\x90\x80\x80", -EILSEQ},
    {"truncated at end", "abc\xe2\x82", -EILSEQ},
    {"latin-1 byte", "caf\xe9", -EILSEQ},
};

Test(rules, check_content_table)
{
    for (size_t i = 0; i < sizeof content_rows / sizeof content_rows[0]; i++) {
        const struct prow *row = &content_rows[i];
        int rc = rules_check_content(row->s, strlen(row->s), NULL);
        cr_expect_eq(rc, row->want, "row %zu (%s): rules_check_content -> %d, want %d", i,
                     row->label, rc, row->want);
    }
}

Test(rules, check_content_sizes)
{
    size_t sizes[] = {0, 1, 102399, 102400, 102401, 200000};
    char *buf = malloc(200001);
    cr_assert_not_null(buf);
    memset(buf, 'x', 200000);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int want = sizes[i] <= MEM_CONTENT_MAX_BYTES ? 0 : -EFBIG;
        int rc = rules_check_content(buf, sizes[i], NULL);
        cr_expect_eq(rc, want, "%zu bytes: got %d want %d", sizes[i], rc, want);
    }
    /* Size is checked in bytes: 102,400 bytes of 4-byte emoji is fine. */
    for (size_t i = 0; i < 102400; i += 4)
        memcpy(buf + i, "\xf0\x9f\x98\x80", 4);
    cr_expect_eq(rules_check_content(buf, 102400, NULL), 0);
    /* An invalid byte inside an otherwise fine buffer is found anywhere. */
    buf[102396] = '\xff';
    cr_expect_eq(rules_check_content(buf, 102400, NULL), -EILSEQ);
    /* NUL bytes are valid UTF-8, but the API refuses content holding one:
     * refused locally, with its own reason. */
    cr_expect(rules_utf8_valid("a\0b", 3));
    const char *why = NULL;
    cr_expect_eq(rules_check_content("a\0b", 3, &why), -EILSEQ);
    cr_expect(why && strstr(why, "NUL"), "reason: %s", why ? why : "(none)");
    free(buf);
}

static const struct prow utf8_rows[] = {
    {"empty", "", 1},
    {"ascii", "abc", 1},
    {"2-byte min U+0080", "\xc2\x80", 1},
    {"3-byte min U+0800", "\xe0\xa0\x80", 1},
    {"4-byte min U+10000", "\xf0\x90\x80\x80", 1},
    {"max U+10FFFF", "\xf4\x8f\xbf\xbf", 1},
    {"U+D7FF (before surrogates)", "\xed\x9f\xbf", 1},
    {"U+E000 (after surrogates)", "\xee\x80\x80", 1},
    {"U+FFFF", "\xef\xbf\xbf", 1},
    {"overlong 2-byte", "\xc0\xaf", 0},
    {"overlong 2-byte C1", "\xc1\xbf", 0},
    {"overlong 3-byte", "\xe0\x80\xaf", 0},
    {"overlong 3-byte max", "\xe0\x9f\xbf", 0},
    {"overlong 4-byte", "\xf0\x80\x80\xaf", 0},
    {"overlong 4-byte max", "\xf0\x8f\xbf\xbf", 0},
    {"surrogate D800", "\xed\xa0\x80", 0},
    {"surrogate DFFF", "\xed\xbf\xbf", 0},
    {"U+110000", "\xf4\x90\x80\x80", 0},
    {"F5 lead", "\xf5\x80\x80\x80", 0},
    {"FE", "\xfe", 0},
    {"FF", "\xff", 0},
    {"lone continuation", "\x80", 0},
    {"truncated 2", "\xc3", 0},
    {"truncated 3", "\xe2\x82", 0},
    {"truncated 4", "\xf0\x9f\x98", 0},
    {"bad continuation", "\xc3\x28", 0},
    {"continuation is ASCII", "\xe2\x28\xa1", 0},
};

Test(rules, utf8_valid_table)
{
    for (size_t i = 0; i < sizeof utf8_rows / sizeof utf8_rows[0]; i++) {
        const struct prow *row = &utf8_rows[i];
        bool got = rules_utf8_valid(row->s, strlen(row->s));
        cr_expect_eq(got, row->want != 0, "row %zu (%s): rules_utf8_valid -> %d, want %d", i,
                     row->label, got, row->want);
    }
    /* The length argument bounds the scan: a 3-byte char cut by n. */
    cr_expect_not(rules_utf8_valid("\xe2\x82\xac", 2));
    cr_expect(rules_utf8_valid("\xe2\x82\xac", 3));
    cr_expect(rules_utf8_valid("\0\0", 2));
}

struct srow {
    const char *name;
    const char *fallback;
    const char *want;
};

static const struct srow slug_rows[] = {
    {"User Preferences", "memstore_x", "user-preferences"},
    {"Demo Memory", "memstore_x", "demo-memory"},
    {"  Notes!", "memstore_x", "notes"},
    {"!!!", "memstore_01abc", "memstore_01abc"},
    {"", "memstore_empty", "memstore_empty"},
    {"a--b__c", "memstore_x", "a-b-c"},
    {"\xc3\x9c" "n" "\xc3\xaf" "code", "memstore_x", "n-code"}, /* "Ünïcode" */
    {"\xe6\x97\xa5\xe6\x9c\xac", "memstore_jp", "memstore_jp"}, /* all non-ASCII */
    {"ABC123", "memstore_x", "abc123"},
    {"v1.2.3", "memstore_x", "v1-2-3"},
    {"-x-", "memstore_x", "x"},
    {"a", "memstore_x", "a"},
};

Test(rules, slug_table)
{
    for (size_t i = 0; i < sizeof slug_rows / sizeof slug_rows[0]; i++) {
        const struct srow *row = &slug_rows[i];
        char *got = rules_slug(row->name, row->fallback);
        cr_assert_not_null(got, "row %zu: rules_slug returned NULL", i);
        cr_expect_str_eq(got, row->want, "row %zu (\"%s\"): slug \"%s\", want \"%s\"", i,
                         row->name, got, row->want);
        free(got);
    }
}

Test(rules, marker_content)
{
    char *m = rules_marker_content("memstore_abc");
    cr_assert_not_null(m);
    cr_expect_str_eq(m, "version 1\nmemstore_abc");
    free(m);
}

struct hrow {
    const char *in;
    size_t len; /* 0: strlen */
    const char *want;
};

static const struct hrow sha_rows[] = {
    {"", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"version 1\nmemstore_abc", 0,
     "e01b122af4ce78531f4f5c5d428e30aee7d5ebfd5349ad7ff8bd417b12ab4bca"},
    {"abc", 0, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 0,
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
};

Test(sha256, known_vectors)
{
    for (size_t i = 0; i < sizeof sha_rows / sizeof sha_rows[0]; i++) {
        char out[SHA256_HEX_LEN + 1];
        memset(out, 'Z', sizeof out);
        size_t len = sha_rows[i].len ? sha_rows[i].len : strlen(sha_rows[i].in);
        sha256_hex(sha_rows[i].in, len, out);
        cr_expect_str_eq(out, sha_rows[i].want, "row %zu: sha256 %s, want %s", i, out,
                         sha_rows[i].want);
        cr_expect(sha256_is_hex(out), "row %zu: output is not 64 lowercase hex", i);
    }
    /* NULL with length 0 is the empty string. */
    char out[SHA256_HEX_LEN + 1];
    sha256_hex(NULL, 0, out);
    cr_expect_str_eq(out, sha_rows[0].want);
}

Test(sha256, is_hex)
{
    struct {
        const char *s;
        bool want;
    } rows[] = {
        {"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", true},
        {"E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855", false},
        {"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85", false},
        {"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b8555", false},
        {"g3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", false},
        {"", false},
        {NULL, false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        cr_expect_eq(sha256_is_hex(rows[i].s), rows[i].want, "row %zu", i);
}
