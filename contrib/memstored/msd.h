/* msd.h - internal interfaces of memstored, the local Memory Stores server.
 *
 * Layers, top to bottom:
 *   main.c     options, start/stop, signal wait
 *   seed.c     --seed NAME=DIR import (calls memories_put_locked)
 *   server.c   libmicrohttpd glue: body accumulation, request ids, the
 *              loopback rule of the listening address
 *   dispatch.c one request without a socket: routing, auth, the
 *              anthropic-beta rule, stats and fault dispatch
 *   faults.c   the admin API: stats counters and the fault list
 *   stores.c / memories.c / versions.c   the endpoints (A.2-A.4)
 *   reply.c    error envelope, JSON replies, body field getters
 *   params.c   query parameters, cursors, timestamps
 *   db.c       SQLite: schema, the one connection and its mutex, ids, clock
 *
 * A handler gets a struct req (never an MHD type) and fills a struct reply.
 * Handlers run one transaction each between db_begin() and db_end(); the
 * transaction holds the db mutex, so a list never sees half of a write. */
#ifndef MSD_H
#define MSD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#define MSD_BODY_MAX (1024 * 1024)
#define MSD_ID_MAX 64
#define MSD_TS_LEN 32

struct db;
struct faults;

/* Shared, read-only after start except the objects that carry their own
 * locks (db, faults). */
struct msd {
    struct db *db;
    char **api_keys; /* owned; n_api_keys entries */
    size_t n_api_keys;
    const char *admin_key; /* NULL: no admin API */
    long max_memories;
    struct faults *faults;
    bool allow_remote; /* --allow-remote: listen on a non-loopback address */
};

/* Where a request's query values and headers come from: a libmicrohttpd
 * connection (server.c) or a request made up by the fuzz target. */
struct msd_io {
    void *ctx;
    /* The (percent-decoded) value of query parameter key, or NULL. */
    const char *(*query)(void *ctx, const char *key);
    /* Up to max values of header name (case-insensitive), in the order
     * they came; returns how many. */
    size_t (*header)(void *ctx, const char *name, const char **vals, size_t max);
};

/* One HTTP request as the handlers see it. */
struct req {
    struct msd *srv;
    const struct msd_io *io; /* query values and headers */
    const char *method;
    const char *path;
    const char *ids[2]; /* the {id} segments of the route, in order */
    const char *body;   /* NUL-terminated, body_len bytes; "" when none */
    size_t body_len;
    const char *actor_key_id; /* "apikey_..." of the caller */
};

/* What a handler answers.  body is malloc'd and owned by the reply. */
struct reply {
    unsigned status;
    char *body;
    size_t body_len;
    const char *request_id;
    char retry_after[32];
    char retry_after_ms[32];
    bool no_retry; /* x-should-retry: false */
};

typedef void (*handler_fn)(struct req *rq, struct reply *rp);

/* ---- db.c ---- */
int db_open(const char *file, struct db **out);
void db_close(struct db **db);
/* Takes the mutex and begins (IMMEDIATE when write). 0 or -errno (unlocked). */
int db_begin(struct db *db, bool write);
/* Commits (or rolls back) and releases the mutex.  Returns the commit's rc. */
int db_end(struct db *db, bool commit);
sqlite3 *db_handle(struct db *db);
/* The one SQLite-to-errno table. */
int db_errno(int sqlite_rc);
/* Prepares sql; 0 or -errno (logged). */
int db_prepare(struct db *db, const char *sql, sqlite3_stmt **st);
/* Steps a statement expected to finish (no rows): 0 or -errno. */
int db_exec_stmt(sqlite3_stmt *st);
/* Current time, RFC 3339 UTC with milliseconds; strictly increasing. */
void db_now(char out[MSD_TS_LEN]);
/* Milliseconds since the epoch as RFC 3339 UTC with milliseconds. */
void ts_format(int64_t ms, char out[MSD_TS_LEN]);
/* prefix + 24 random base62 characters into out (>= MSD_ID_MAX). */
void db_new_id(const char *prefix, char out[MSD_ID_MAX]);
/* Copies column i as text into a malloc'd string (NULL for SQL NULL). */
char *db_col_strdup(sqlite3_stmt *st, int i);

/* ---- reply.c ---- */
/* Prints obj (then deletes it) as the body; OOM becomes a 500. */
void reply_json(struct reply *rp, unsigned status, cJSON *obj);
void reply_error(struct reply *rp, unsigned status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void reply_invalid(struct reply *rp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void reply_not_found(struct reply *rp, const char *what, const char *id);
void reply_path_conflict(struct reply *rp, const char *mem_id, const char *path);
void reply_precondition(struct reply *rp, const char *msg);
/* Internal failure (-errno) as 500 api_error. */
void reply_errno(struct reply *rp, int rc);
const char *reply_error_type(unsigned status);
void reply_release(struct reply *rp);

/* Parses the body as a JSON object.  allow_empty: an empty body is {}.
 * Returns 0 with *out (caller deletes) or -EINVAL with rp filled. */
int body_object(const struct req *rq, struct reply *rp, bool allow_empty, cJSON **out);
/* A string-or-null field.  *out = NULL when absent or null.  Returns 0, or
 * -EINVAL with rp filled when the value has another type. */
int jfield_str(struct reply *rp, const cJSON *obj, const char *key, const char **out);
/* Characters (code points) of valid UTF-8. */
size_t utf8_chars(const char *s);
bool has_control_chars(const char *s);

/* ---- params.c ---- */
const char *req_query(const struct req *rq, const char *key);
/* The view param: 0, or -EINVAL with rp filled.  *full gets the choice. */
int q_view(const struct req *rq, struct reply *rp, bool dflt_full, bool *full);
/* limit 1..100 (default 20), clamped to 20 when full. */
int q_limit(const struct req *rq, struct reply *rp, bool full, int *out);
/* created_at[gte]/[lte] ("created_at%5Bgte%5D" too) as canonical
 * timestamps; out is "" when absent. */
int q_created_at(const struct req *rq, struct reply *rp, const char *op,
                 char out[MSD_TS_LEN]);
/* RFC 3339 -> canonical "YYYY-MM-DDTHH:MM:SS.mmmZ"; 0 or -EINVAL. */
int ts_canonical(const char *in, char out[MSD_TS_LEN]);
/* "page_" + base64url(data).  Malloc'd; caller frees.  NULL on ENOMEM. */
char *cursor_encode(const char *data, size_t n);
/* Decodes a page token into a malloc'd NUL-terminated string (*n bytes);
 * NULL when the token is malformed or on ENOMEM. */
char *cursor_decode(const char *tok, size_t *n);
/* The API key id of a key: "apikey_" + 16 hex of its sha256. */
void api_key_id(const char *key, char out[MSD_ID_MAX]);

/* ---- stores.c ---- */
void stores_create(struct req *rq, struct reply *rp);
void stores_list(struct req *rq, struct reply *rp);
void stores_get(struct req *rq, struct reply *rp);
void stores_update(struct req *rq, struct reply *rp);
void stores_archive(struct req *rq, struct reply *rp);
void stores_delete(struct req *rq, struct reply *rp);
/* Inside a transaction: 0 (with *archived), -ENOENT or -errno. */
int stores_lookup(struct db *db, const char *id, bool *archived);
/* Inside a write transaction: inserts a store with the given name. */
int stores_insert(struct db *db, const char *name, const char *description,
                  const char *metadata_json, char out_id[MSD_ID_MAX]);

/* ---- memories.c ---- */
void memories_create(struct req *rq, struct reply *rp);
void memories_list(struct req *rq, struct reply *rp);
void memories_get(struct req *rq, struct reply *rp);
void memories_update(struct req *rq, struct reply *rp);
void memories_delete(struct req *rq, struct reply *rp);
/* Seeding: create or update the memory at path to hold content (inside a
 * write transaction).  Returns 0 (changed or already equal), -EEXIST on a
 * path overlap, -ENOSPC when the store is full, or -errno. */
int memories_put_locked(struct msd *srv, const char *store_id, const char *path,
                        const char *content, size_t n, const char *actor);

/* ---- versions.c ---- */
void versions_list(struct req *rq, struct reply *rp);
void versions_get(struct req *rq, struct reply *rp);
void versions_redact(struct req *rq, struct reply *rp);
/* Inside a write transaction: appends one version.  content/sha NULL for a
 * deleted version.  Writes the new id into out_id. */
int versions_insert(struct db *db, const char *store_id, const char *mem_id, const char *op,
                    const char *path, const char *content, size_t n, const char *sha,
                    const char *actor, const char *now, char out_id[MSD_ID_MAX]);

/* ---- faults.c ---- */
enum fault_action {
    FAULT_NONE = 0,
    FAULT_STATUS,  /* answer status at once, nothing served */
    FAULT_LATENCY, /* sleep, then serve */
    FAULT_DROP,    /* serve and commit, then close without an answer */
    FAULT_CUT,     /* close the connection at once: nothing served */
    FAULT_REPLY,   /* answer status with a canned body, nothing served */
    FAULT_PAGES,   /* a memories list that never ends (faults_pages) */
};
struct fault_hit {
    enum fault_action action;
    unsigned status;
    long latency_ms;
    long cycle; /* pages: next_page goes round this many cursors (0: never repeats) */
    long items; /* pages: made-up memories per page */
    bool malformed; /* pages: each item with a bad content_sha256 (a broken server) */
    char retry_after[32];
    char retry_after_ms[32];
    char *body; /* FAULT_REPLY: malloc'd copy for the caller (fault_hit_release) */
};
void fault_hit_release(struct fault_hit *hit);
int faults_new(struct faults **out);
void faults_free(struct faults **f);
/* Counts a /v1 request under route ("METHOD template" or NULL). */
void faults_count(struct faults *f, const char *method, const char *route);
/* A latency fault's sleep: ms, or until faults_stop (the server is
 * stopping: its connection threads must end). */
void faults_sleep(struct faults *f, long ms);
void faults_stop(struct faults *f);
/* The first matching fault whose action is in kinds (bits 1 << action;
 * its count goes down); FAULT_NONE when none. */
#define FAULT_KIND(a) (1u << (a))
void faults_match(struct faults *f, const struct req *rq, const char *method, const char *path,
                  unsigned kinds, struct fault_hit *hit);
/* A pages fault's answer to a memories list: `items` made-up memories and
 * a next_page cursor "page_loop<k+1>" (k from the request's page, modulo
 * cycle when cycle > 0): a server whose listing never ends. */
void faults_pages(const struct req *rq, const struct fault_hit *hit, struct reply *rp);
/* Admin endpoints; path is the URL path under /admin. */
void faults_admin(struct msd *srv, struct req *rq, struct reply *rp);
/* db.c: the clock of new writes, for tests: offset_ms shifts every new
 * timestamp (a negative one stamps writes earlier than writes already
 * made: they "arrive late"); freeze gives every new write the same
 * millisecond.  (0, false) is the normal clock, strictly increasing. */
void db_clock_set(int64_t offset_ms, bool freeze);

/* ---- dispatch.c ---- */
/* Answers one request (body may be NULL; too_large: the body was cut at
 * MSD_BODY_MAX).  rp must come zeroed but for status and request_id; it
 * always gets a body.  *drop: close the connection without answering. */
void msd_handle(struct msd *srv, const struct msd_io *io, const char *method, const char *url,
                const char *body, size_t body_len, bool too_large, struct reply *rp,
                bool *drop);
/* Key comparison in constant time (independent of where they differ and
 * of their lengths). */
bool key_eq(const char *given, const char *known);

/* ---- server.c ---- */
struct server;
/* Starts listening on host:port (port 0: any).  *bound_port gets the port. */
int server_start(struct msd *srv, const char *host, int port, struct server **out,
                 int *bound_port);
void server_stop(struct server **s);

/* ---- seed.c ---- */
/* Imports dir as the store named name; prints the seeded line. */
int seed_store(struct msd *srv, const char *name, const char *dir);

#endif
