/* fuzz_session.c - libFuzzer target: the session file parser and the
 * work-secret decoder of sync/session.c on arbitrary bytes.  The first
 * byte picks which.  Besides memory errors and undefined behaviour, it
 * checks what session.h promises of an accepted session: at most
 * SESSION_STORES_MAX stores, each with a non-empty id and name and an
 * absolute mount path, no store id or mount path twice. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 1) {
        char *s = malloc(len + 1);
        if (!s)
            return 0;
        memcpy(s, body, len);
        s[len] = '\0';
        char *token = NULL;
        if (work_secret_token(s, &token) == 0 && (!token || !*token))
            abort();
        free(token);
        free(s);
        return 0;
    }
    struct session_store *st = NULL;
    size_t n = 0;
    char why[512];
    if (session_parse(body, len, &st, &n, why, sizeof(why)) == 0) {
        if (n > SESSION_STORES_MAX)
            abort();
        for (size_t i = 0; i < n; i++) {
            if (!st[i].id || !*st[i].id || !st[i].name || !st[i].mount_path ||
                st[i].mount_path[0] != '/')
                abort();
            for (size_t j = 0; j < i; j++)
                if (strcmp(st[i].id, st[j].id) == 0 ||
                    strcmp(st[i].mount_path, st[j].mount_path) == 0)
                    abort();
        }
    } else if (!why[0]) {
        abort(); /* a refusal always says why */
    }
    session_stores_free(st, n);
    return 0;
}
