/* fuzz_msd.c - libFuzzer target: memstored's request handling
 * (msd_handle in contrib/memstored/dispatch.c), driven without a socket
 * against an in-memory database.  An input is one HTTP request in a plain
 * form:
 *   METHOD SP PATH[?QUERY] LF  (header-name ":" value LF)*  LF  body
 * Query values are percent-decoded as libmicrohttpd would.  The key "k"
 * is the one API key, so seeds can reach every handler.  Besides memory
 * errors and undefined behaviour, it checks that every answer is a JSON
 * object with a status from 200 to 599.  The database is reopened every
 * 256 inputs so that it stays small. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "msd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ITEMS 32

struct fuzz_req {
    char *names[MAX_ITEMS], *values[MAX_ITEMS];
    size_t n_headers;
    char *qkeys[MAX_ITEMS], *qvals[MAX_ITEMS];
    size_t n_query;
};

static const char *q_lookup(void *ctx, const char *key)
{
    struct fuzz_req *r = ctx;
    for (size_t i = 0; i < r->n_query; i++)
        if (strcmp(r->qkeys[i], key) == 0)
            return r->qvals[i];
    return NULL;
}

static size_t h_lookup(void *ctx, const char *name, const char **vals, size_t max)
{
    struct fuzz_req *r = ctx;
    size_t n = 0;
    for (size_t i = 0; i < r->n_headers && n < max; i++)
        if (strcasecmp(r->names[i], name) == 0)
            vals[n++] = r->values[i];
    return n;
}

static int hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decodes s in place ('+' stays '+', as libmicrohttpd keeps it). */
static void pct_decode(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (s[0] == '%' && hex(s[1]) >= 0 && hex(s[2]) >= 0) {
            *o++ = (char)(hex(s[1]) * 16 + hex(s[2]));
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

static struct msd srv;
static char *keys[] = {(char *)"k"};
static unsigned runs;

static void open_server(void)
{
    if (srv.db && runs % 256 != 0)
        return;
    db_close(&srv.db);
    if (!srv.faults && faults_new(&srv.faults) != 0)
        abort();
    if (db_open(":memory:", &srv.db) != 0)
        abort();
    srv.api_keys = keys;
    srv.n_api_keys = 1;
    srv.admin_key = NULL; /* the admin API could make a request sleep */
    srv.max_memories = 64;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull && (devnull = fopen("/dev/null", "w")))
        log_set_stream(devnull);
    open_server();
    runs++;
    /* The head (request line and headers) is NUL-terminated text; the body
     * keeps every byte. */
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *end = memmem(buf, size, "\n\n", 2);
    char *body = end ? end + 2 : buf + size;
    size_t body_len = end ? size - (size_t)(body - buf) : 0;
    if (end)
        *end = '\0';
    struct fuzz_req r = {0};
    char *save = NULL;
    char *line = strtok_r(buf, "\n", &save);
    char *method = line ? strtok_r(line, " ", &line) : NULL;
    char *url = line && *line ? line : NULL;
    if (!method || !url || url[0] != '/') {
        free(buf);
        return 0;
    }
    while ((line = strtok_r(NULL, "\n", &save)) && r.n_headers < MAX_ITEMS) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ')
            v++;
        r.names[r.n_headers] = line;
        r.values[r.n_headers++] = v;
    }
    char *q = strchr(url, '?');
    if (q) {
        *q++ = '\0';
        char *qs = NULL;
        for (char *kv = strtok_r(q, "&", &qs); kv && r.n_query < MAX_ITEMS;
             kv = strtok_r(NULL, "&", &qs)) {
            char *eq = strchr(kv, '=');
            if (eq)
                *eq++ = '\0';
            pct_decode(kv);
            if (eq)
                pct_decode(eq);
            r.qkeys[r.n_query] = kv;
            r.qvals[r.n_query++] = eq ? eq : (char *)"";
        }
    }
    pct_decode(url);
    struct msd_io io = {.ctx = &r, .query = q_lookup, .header = h_lookup};
    struct reply rp = {.status = 500, .request_id = "req_fuzz"};
    bool drop = false;
    bool too_large = body_len > MSD_BODY_MAX;
    msd_handle(&srv, &io, method, url, body_len ? body : NULL, too_large ? 0 : body_len,
               too_large, &rp, &drop);
    if (!rp.body || rp.status < 200 || rp.status > 599)
        abort();
    cJSON *j = cJSON_ParseWithLength(rp.body, rp.body_len);
    if (!cJSON_IsObject(j))
        abort(); /* every answer is a JSON object */
    cJSON_Delete(j);
    reply_release(&rp);
    free(buf);
    return 0;
}
