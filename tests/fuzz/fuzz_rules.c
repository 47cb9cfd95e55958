/* fuzz_rules.c - libFuzzer target: the path, segment, prefix, content,
 * slug and marker rules of cache/rules.c on arbitrary bytes.  Besides
 * memory errors (ASan) and undefined behaviour (UBSan), it checks that the
 * rules agree with each other: an accepted path is valid UTF-8 and each of
 * its segments is an accepted segment; an accepted prefix is "/" or an
 * accepted path plus "/"; a slug is never empty and only [a-z0-9-]. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    const char *why;
    bool utf8 = rules_utf8_valid(s, size);
    (void)rules_check_content(s, size, &why);
    if (rules_check_path(s, size, &why) == 0) {
        if (!utf8 || strlen(s) != size || s[0] != '/')
            abort();
        char *copy = strdup(s);
        char *save = NULL;
        for (char *seg = strtok_r(copy + 1, "/", &save); seg; seg = strtok_r(NULL, "/", &save))
            if (rules_check_segment(seg, &why) != 0)
                abort(); /* a path the rules accept holds a segment they refuse */
        free(copy);
    }
    if (strlen(s) == size) {
        (void)rules_check_segment(s, &why);
        if (rules_check_prefix(s, &why) == 0 && strcmp(s, "/") != 0) {
            if (size < 2 || s[size - 1] != '/')
                abort();
            s[size - 1] = '\0';
            if (rules_check_path(s, size - 1, &why) != 0)
                abort(); /* an accepted prefix that is not a path plus "/" */
            s[size - 1] = '/';
        }
        char *slug = rules_slug(s, "fallback");
        if (slug) {
            if (!*slug)
                abort();
            for (const char *c = slug; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' ||
                      *c == '_'))
                    abort();
            free(slug);
        }
        free(rules_marker_content(s));
    }
    free(s);
    return 0;
}
