/* api.h - bindings of the Memory Stores API (memory-store-api.md A.0-A.5)
 * over the HTTP client of http.h.  JSON (cJSON) stays inside sync/.
 *
 * Every function returns 0 or a negative errno:
 *   -ESTALE  409 memory_precondition_failed_error (and 412)
 *   -EEXIST  409 memory_path_conflict_error
 *   -EBUSY   409 conflict_error (or a 409 of another type)
 *   -ENOENT  404   -EINVAL 400   -EFBIG 413   -EACCES 401   -EPERM 403
 *   -EAGAIN  429 (or 503/529) after the retries ran out;  -EIO other 5xx
 *   -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH, -ECONNRESET: transport
 *   -EPROTO  the server answered 2xx with a malformed body (logged)
 *   -EILSEQ  content handed in is not UTF-8 (refused before sending)
 * When a struct api_error is passed, it is filled on every failure that
 * got an HTTP answer (status, error.type, message, request id, and for a
 * path conflict the blocker).
 *
 * Ownership: every struct filled here owns its strings; release them with
 * the matching *_clear/_free, which accept zeroed and NULL structs.  All
 * functions are thread-safe as http_run is (the client is shared). */
#ifndef MFS_SYNC_API_H
#define MFS_SYNC_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http.h"

struct api_error {
    long status;                    /* 0 when no HTTP answer arrived */
    char type[64];                  /* error.type, e.g. "not_found_error" */
    char message[256];              /* error.message (truncated) */
    char request_id[64];
    char conflicting_memory_id[64]; /* memory_path_conflict_error only */
    char *conflicting_path;         /* idem; malloc'd, api_error_clear frees */
};

struct api_memory {
    char *id, *path, *version_id; /* malloc'd */
    int64_t updated_ns;           /* updated_at (ns since the epoch), 0 if absent */
    char sha[65];                 /* content_sha256, 64 lowercase hex */
    long size;                    /* content_size_bytes */
    char *content;                /* view=full only, else NULL; exactly size
                                   * bytes (may hold NUL) plus a NUL after */
    size_t content_len;
};

/* A listed item the parser could not take (the rest of its page is). */
struct api_skipped {
    char *id;           /* its id if it had a usable one, else NULL (malloc'd) */
    char *path;         /* its path if it had a string one, else NULL (malloc'd) */
    const char *reason; /* static */
};

struct api_list {
    struct api_memory *items; /* malloc'd array; api_list_free frees */
    size_t n;
    struct api_skipped *skipped; /* malformed items, left out */
    size_t n_skipped;
};

struct api_store {
    char *id, *name, *description; /* malloc'd; description "" when unset */
    bool archived;
};

void api_memory_clear(struct api_memory *m);
void api_list_free(struct api_list *l);
/* Appends a memory (basic view: no content) to a listing. */
int api_list_add(struct api_list *l, const char *id, const char *path, const char *sha,
                 long size, int64_t updated_ns);
/* The same, with the memory_version_id of that state (NULL: unknown). */
int api_list_add_version(struct api_list *l, const char *id, const char *path, const char *sha,
                         long size, int64_t updated_ns, const char *version_id);
void api_store_clear(struct api_store *s);
void api_error_clear(struct api_error *e);

/* GET /v1/memory_stores/{id}. */
int api_store_get(struct http_client *c, const char *store_id, struct api_store *out,
                  struct api_error *e);

/* Every memory of the store: view=basic, limit=100, each page in turn;
 * memory_prefix items are skipped; a malformed memory item is left out and
 * described in out->skipped, and the rest of its page is kept.  path_prefix
 * (must end with '/') limits the listing; NULL lists the whole store.  On
 * failure *out is empty.
 * Bounded whatever the server does: a next_page cursor already used by
 * this listing (or longer than 4096 bytes) is -EPROTO (e: type
 * "malformed_response"); a listing that passes the memory budget is
 * -EFBIG (e: type "listing_too_large", the message says how far it got). */
int api_memories_list(struct http_client *c, const char *store_id, struct api_list *out,
                      struct api_error *e);
int api_memories_list_prefix(struct http_client *c, const char *store_id,
                             const char *path_prefix, struct api_list *out,
                             struct api_error *e);
/* The same, calling progress (may be NULL) after each page with the
 * number of items listed so far and whether that page was the last. */
typedef void (*api_progress_fn)(void *arg, size_t listed, bool last);
int api_memories_list_progress(struct http_client *c, const char *store_id,
                               const char *path_prefix, struct api_list *out,
                               struct api_error *e, api_progress_fn progress, void *arg);

/* The whole store listed by directory: the root with depth=1, then each
 * top-level directory its rollups name, up to 8 at once.  The same items
 * as api_memories_list_progress (in another order), in a few round trips
 * instead of one per 100 memories.  -ENOTSUP when the server's answers do
 * not fit that shape (an item deeper than depth=1 allows, a rollup that is
 * not "/name/", a directory's item outside it), -E2BIG when the root
 * holds more than 64 directories (many small ones would cost more round
 * trips than pages): list page by page then. */
int api_memories_list_tree(struct http_client *c, const char *store_id, struct api_list *out,
                           struct api_error *e, api_progress_fn progress, void *arg);

/* The memory budget of one listing (items and cursors), in bytes; 0 sets
 * the default, 256 MiB.  Call before any thread lists (tests lower it). */
void api_set_list_budget(size_t bytes);

/* Retrieve with view=full, many at once (the client's max_in_flight).
 * Each item gets its own err/mem/e (clear each mem and e afterwards).  The
 * content is checked against content_size_bytes and content_sha256.
 * Returns 0 when all succeeded, else the first item's error (or -ENOMEM
 * before any request). */
struct api_fetch {
    const char *memory_id; /* in, borrowed */
    int err;               /* out */
    struct api_memory mem; /* out */
    struct api_error e;    /* out */
};
int api_memories_fetch(struct http_client *c, const char *store_id, struct api_fetch *f,
                       size_t n);
/* The same, ended by deadline_ms (http_now_ms's clock; 0: none): an item
 * not fetched by then, its retries and a 429's pause included, ends
 * -ETIMEDOUT (or with the 429's error, when its pause ends past it). */
int api_memories_fetch_until(struct http_client *c, const char *store_id, struct api_fetch *f,
                             size_t n, int64_t deadline_ms);

/* Pages of view=full listings (20 memories with content a page) for many
 * prefixes at once (api_pages.c), each lane at its own pace.  A lane
 * lists path_prefix (ending with '/'), with depth1 only the memories
 * directly in it, from cursor (NULL: the first page).  After each of its
 * pages, turn(arg, r) is called with r->items holding that page's
 * memories (content checked; malformed items left out, in items.skipped;
 * freed when turn returns), r->err / r->e its error, and r->done set at
 * its last page or an error.  turn returns true to go on: with the next
 * page while !r->done, or with the first page of another prefix it set
 * after api_page_req_clear (cursor NULL, done false, pages 0); false ends
 * the lane.  A lane a cancel ends has done set and err -ECANCELED.
 * Returns -ENOMEM or -EINVAL before any request, else 0. */
struct api_page_req {
    const char *path_prefix; /* in, borrowed */
    bool depth1;             /* in */
    char *cursor;            /* the next page (malloc'd; NULL: the first) */
    bool done;
    int pages;               /* pages read so far */
    int err;
    struct api_list items;
    struct api_error e;
};
typedef bool (*api_page_turn)(void *arg, struct api_page_req *r);
int api_pages_run(struct http_client *c, const char *store_id, struct api_page_req *r, size_t n,
                  api_page_turn turn, void *arg);
void api_page_req_clear(struct api_page_req *r);

/* Single writes.  out (view=basic: no content) may be NULL. */
int api_memory_create(struct http_client *c, const char *store_id, const char *path,
                      const char *content, size_t len, struct api_memory *out,
                      struct api_error *e);
/* new_path NULL keeps the path, content NULL keeps the content (len is then
 * ignored), precondition_sha NULL sends no precondition. */
int api_memory_update(struct http_client *c, const char *store_id, const char *id,
                      const char *new_path, const char *content, size_t len,
                      const char *precondition_sha, struct api_memory *out,
                      struct api_error *e);
/* expected_sha NULL deletes unconditionally. */
int api_memory_delete(struct http_client *c, const char *store_id, const char *id,
                      const char *expected_sha, struct api_error *e);

/* The batch form for the sync engine: each write is one request, all run
 * with up to max_in_flight at once, each with its own result. */
enum api_write_op { API_WRITE_CREATE, API_WRITE_UPDATE, API_WRITE_DELETE };
struct api_write {
    /* in (borrowed for the call): */
    enum api_write_op op;
    const char *memory_id; /* update, delete */
    const char *path;      /* create: the path; update: new path or NULL */
    const char *content;   /* create: content (NULL = ""); update: NULL keeps */
    size_t content_len;
    const char *sha;       /* update: precondition; delete: expected sha;
                            * NULL: none */
    /* out: */
    int err;
    int attempts;          /* requests sent (a lost answer may have applied) */
    struct api_memory mem; /* create/update: the memory as saved (basic) */
    struct api_error e;
};
/* Returns 0 when all succeeded, else the first item's error (or -ENOMEM /
 * -EINVAL before any request).  Clear each item with api_write_clear. */
int api_memories_write(struct http_client *c, const char *store_id, struct api_write *w,
                       size_t n);
void api_write_clear(struct api_write *w);

/* ---- The version feed (api_versions.c) ---- */
enum api_op { API_OP_CREATED, API_OP_MODIFIED, API_OP_DELETED };
struct api_version {
    char *id, *memory_id;  /* malloc'd */
    char *path;            /* malloc'd; NULL when redacted */
    char sha[65];          /* content_sha256; "" for a deletion or a redaction */
    long size;             /* content_size_bytes; -1 when null */
    enum api_op op;
    bool redacted;
    int64_t created_ns;    /* created_at in ns since the epoch */
    char created_at[48];   /* created_at as the server wrote it */
    char actor_type[32];   /* created_by.type ("session_actor", "api_actor",
                            * "user_actor", "service_account_actor"), "" when null */
    char actor_id[128];    /* that actor's id, "" when none */
    char redacted_at[48];  /* "" when not redacted */
    char *content;         /* api_version_get of a live version: the bytes
                            * (malloc'd, content_len of them plus a NUL) */
    size_t content_len;
};
struct api_versions {
    struct api_version *items; /* newest first, as served */
    size_t n, cap;
    size_t n_bad;              /* malformed items left out */
    bool complete;             /* every page down to the bound was read */
    int64_t server_ns;         /* the server's clock when the first page was
                                * served (its Date header), 0 if unknown */
};
/* Every version of the store created at or after gte (an RFC 3339 time;
 * NULL: all), view=basic, limit (1..100) a page, at most max_pages pages.
 * On failure *out is empty. */
int api_versions_since(struct http_client *c, const char *store_id, const char *gte, int limit,
                       size_t max_pages, struct api_versions *out, struct api_error *e);
void api_versions_free(struct api_versions *v);
/* The same with any of the list's filters (NULL: none): created_at[gte],
 * memory_id, operation ("created", "modified", "deleted"). */
struct api_vfilter {
    const char *gte, *memory_id, *operation;
};
int api_versions_list(struct http_client *c, const char *store_id, const struct api_vfilter *f,
                      int limit, size_t max_pages, struct api_versions *out,
                      struct api_error *e);
/* GET .../memory_versions/{id}?view=full: one version, with its content
 * (checked against content_size_bytes and content_sha256) unless it is a
 * deletion or redacted.  Clear it with api_version_clear. */
int api_version_get(struct http_client *c, const char *store_id, const char *version_id,
                    struct api_version *out, struct api_error *e);
void api_version_clear(struct api_version *v);

/* The errno an HTTP answer stands for, refining 409 (and 412) by
 * error.type: the one place where error types become errnos. */
int api_errno(long status, const char *error_type);

#endif
