/* test_base_text.c - the base library's text output: the one JSON string
 * writer (cache/jbuf.c) always writes valid JSON, whatever bytes it is
 * given, and log lines (cache/log.c) escape bytes from a server so that a
 * line is one line of valid UTF-8.  Before issue 9 a byte that is not
 * UTF-8 went into both as it was. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jbuf.h"
#include "log.h"
#include "rules.h"

static char *enc(const char *s, size_t n)
{
    struct jbuf b = {0};
    cr_assert_eq(jbuf_add_json_str(&b, s, n), 0);
    return jbuf_steal(&b);
}

Test(jbuf, every_string_becomes_valid_json)
{
    const char in[] = "q\"b\\s/é\xff\xc3(\xe2\x82\n\x01\x7f😀";
    char *out = enc(in, sizeof(in) - 1);
    cr_expect_str_eq(out, "\"q\\\"b\\\\s/é\\ufffd\\ufffd(\\ufffd\\ufffd\\n\\u0001\\u007f😀\"");
    cr_expect(rules_utf8_valid(out, strlen(out)), "the output is not UTF-8");
    cJSON *v = cJSON_Parse(out);
    cr_expect(cJSON_IsString(v), "not JSON: %s", out);
    cJSON_Delete(v);
    free(out);
    struct jbuf b = {0};
    jbuf_add_json_cstr(&b, NULL);
    jbuf_adds(&b, ",");
    jbuf_add_json_cstr(&b, "/mnt/a \"quoted\" path");
    char *s = jbuf_steal(&b);
    cr_expect_str_eq(s, "null,\"/mnt/a \\\"quoted\\\" path\"");
    free(s);
}

/* Random bytes: the output always parses, and valid UTF-8 input comes
 * back exactly. */
Test(jbuf, random_bytes_always_parse)
{
    unsigned seed = 9;
    for (int round = 0; round < 2000; round++) {
        char buf[64];
        size_t n = (size_t)(rand_r(&seed) % 40);
        for (size_t i = 0; i < n; i++)
            buf[i] = (char)(rand_r(&seed) % 255 + 1);
        char *out = enc(buf, n);
        cJSON *v = cJSON_Parse(out);
        cr_assert(cJSON_IsString(v), "round %d: not JSON: %s", round, out);
        cr_assert(rules_utf8_valid(out, strlen(out)), "round %d: JSON text that is not UTF-8",
                  round);
        if (rules_utf8_valid(buf, n))
            cr_assert(strlen(v->valuestring) == n && memcmp(v->valuestring, buf, n) == 0);
        cJSON_Delete(v);
        free(out);
    }
}

static char *log_line(const char *value)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    log_set_stream(f);
    log_warn("failed", "error", value);
    log_set_stream(NULL);
    fclose(f);
    char *body = strstr(text, " level=");
    cr_assert_not_null(body, "%s", text);
    char *out = strdup(body + 1);
    free(text);
    return out;
}

Test(log, bytes_from_a_server_are_escaped)
{
    char *l = log_line("bad \xff\xfe byte");
    cr_expect_str_eq(l, "level=warn msg=failed error=\"bad \\xff\\xfe byte\"\n");
    free(l);
    l = log_line("nospace\xc3");
    cr_expect_str_eq(l, "level=warn msg=failed error=\"nospace\\xc3\"\n",
                     "a value without a space was written raw");
    free(l);
    l = log_line("caf\xc3\xa9/ok");
    cr_expect_str_eq(l, "level=warn msg=failed error=café/ok\n", "valid UTF-8 stays as it is");
    free(l);
    l = log_line("del\x7f c1\xc2\x85 ls\xe2\x80\xa8 nl\n");
    cr_expect_str_eq(l, "level=warn msg=failed error=\"del\\x7f c1\\u0085 ls\\u2028 nl\\n\"\n");
    free(l);
}

Test(log, a_long_line_is_cut_between_characters)
{
    /* Both parities of where the cut falls, quoted or not. */
    for (int shift = 0; shift < 4; shift++) {
        static char v[6000];
        size_t n = 0;
        for (int k = 0; k < shift % 2; k++)
            v[n++] = 'x';
        if (shift >= 2)
            v[n++] = ' ';
        while (n + 2 < sizeof(v) - 1) {
            v[n++] = '\xc3';
            v[n++] = '\xa9';
        }
        v[n] = '\0';
        char *l = log_line(v);
        size_t len = strlen(l);
        cr_expect_lt(len, 4096);
        cr_expect(rules_utf8_valid(l, len), "shift %d: the cut line is not UTF-8", shift);
        cr_expect_eq(l[len - 1], '\n');
        free(l);
    }
}
