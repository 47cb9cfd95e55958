/* msd.h - shared test support: start and stop a private memstored by PID,
 * and talk HTTP to it (libcurl easy + cJSON).
 *
 * Every test that needs a server starts its own in .init with msd_start()
 * and stops it in .fini with msd_stop(), so a failed assertion never leaves
 * a process behind; the child also gets PR_SET_PDEATHSIG so that a test
 * process killed by a crash or a timeout takes its server with it.
 *
 * Environment knobs (all optional):
 *   MEMSTORED_BIN  path of the server binary (default: the build's memstored)
 *   MSD_TMPDIR     where the per-server temp dirs go (default /dev/shm when
 *                  writable, else $TMPDIR, else /tmp)
 *   MSD_KEEP=1     msd_stop() leaves the dir (db, stdout.log, stderr.log)
 *                  in place for a post-mortem
 *
 * Threads: t_http() and friends keep one CURL easy handle per thread (so the
 * connection is reused between calls); they may be called from any thread. */
#ifndef MFS_TEST_MSD_H
#define MFS_TEST_MSD_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* ---- the contract interface (CONTRACTS.md) ---------------------------- */

struct msd {
    pid_t pid;
    int port;
    char url[64];  /* "http://127.0.0.1:PORT", no trailing slash */
    char dir[256]; /* the temp dir holding memstored.db and the logs */
    /* Extensions: everything memstored printed on stdout before (and
     * including) its listening line, NUL-terminated; malloc'd, freed by
     * msd_stop().  NULL when not started. */
    char *out;
};

/* Starts MEMSTORED_BIN with --listen 127.0.0.1:0 --db <dir>/memstored.db
 * --api-key test-key --admin-key admin-key and extra_args (NULL-terminated,
 * may be NULL) in a fresh mkdtemp dir; waits (10 s max) for the listening
 * line; fills url/port.  Returns 0 or a negative errno. */
int msd_start(struct msd *m, const char *const *extra_args);
/* SIGTERM by pid, waitpid (SIGKILL after 5 s), removes dir. Safe twice. */
void msd_stop(struct msd *m);

struct tresp {
    long status;
    char *body;  /* NUL-terminated response body (malloc'd), never NULL on 0 */
    cJSON *json; /* parsed body, NULL when it is not JSON */
    char retry_after[32];
    char request_id[64];
    /* Extensions. */
    char retry_after_ms[32];
    char should_retry[16]; /* x-should-retry */
    char content_type[128];
    char *headers; /* every response header line, "\r\n"-separated; malloc'd */
};

/* headers: NULL-terminated "Name: value" strings.  Returns 0 or -errno. */
int t_http(const char *method, const char *url, const char *body,
           const char *const *headers, struct tresp *r);
/* /v1 call with test-key and the agent-memory beta header. */
int t_api(const struct msd *m, const char *method, const char *path,
          const char *body, struct tresp *r);
/* /admin call with admin-key. */
int t_admin(const struct msd *m, const char *method, const char *path,
            const char *body, struct tresp *r);
void tresp_free(struct tresp *r);
/* Helpers: create a store (returns malloc'd id), create a memory. */
char *t_create_store(const struct msd *m, const char *name);
char *t_create_memory(const struct msd *m, const char *store, const char *path, const char *content);
long t_route_count(const struct msd *m, const char *route); /* from /admin/stats */

/* ---- extensions --------------------------------------------------------- */

/* Like msd_start() but in an existing dir (which then belongs to m: a later
 * msd_stop(m) removes it).  For restarts on the same --db. */
int msd_start_in(struct msd *m, const char *dir, const char *const *extra_args);
/* Like msd_start() but with full control of the command line: only
 * "--listen 127.0.0.1:0" is added; args NULL-terminated.  extra_env
 * (NULL-terminated "K=V", may be NULL) is added to the environment.  For
 * testing the server's own argument handling. */
int msd_start_raw(struct msd *m, const char *dir, const char *const *args,
                  const char *const *extra_env);
/* Stops the server like msd_stop() but keeps m->dir on disk (and clears
 * m->dir, so the caller must copy it first). */
void msd_stop_keep(struct msd *m);
/* SIGTERM and wait; returns the exit status as waitpid() gives it, or
 * -errno.  Clears m->pid; leaves the dir. */
int msd_terminate(struct msd *m);

/* While on, this thread's requests each use a new connection, closed
 * after the answer.  libcurl silently resends a request whose kept-alive
 * connection closed without an answer; a test of a dropped response
 * (drop_after_commit) needs this to see the transport error itself. */
void t_http_fresh(bool on);
/* Same as t_http() with an explicit body length (bodies with NUL bytes). */
int t_http_n(const char *method, const char *url, const char *body, size_t body_len,
             const char *const *headers, struct tresp *r);
/* /v1 call with extra headers added after the default ones. */
int t_api_h(const struct msd *m, const char *method, const char *path, const char *body,
            const char *const *extra_headers, struct tresp *r);

/* printf-style path; returns r->status, or a negative errno when no HTTP
 * answer arrived. */
long t_req(const struct msd *m, const char *method, const char *body, struct tresp *r,
           const char *path_fmt, ...) __attribute__((format(printf, 5, 6)));

/* Sends n requests of the same method to the same path with bodies[i]
 * (NULL = no body), at most `parallel` at a time over curl multi; status[i]
 * gets the HTTP status or a negative errno; ids (may be NULL) gets the
 * malloc'd "id" of each answer (NULL if none).  Returns 0 or -errno;
 * on an error, the requests never sent have -ECANCELED and no id. */
int t_api_multi(const struct msd *m, const char *method, const char *path,
                const char *const *bodies, size_t n, int parallel, long *status, char **ids);

/* Walks every page of a list (path plus query, without page=), appending
 * each item of "data" (duplicated) to the returned array.  *pages gets the
 * number of pages (may be NULL).  Returns NULL and sets *err (status or
 * -errno) when a page fails.  Caller cJSON_Delete()s. */
cJSON *t_list_all(const struct msd *m, const char *path_and_query, int *pages, long *err);

/* Dotted lookups into parsed JSON: "error.type", "data".  NULL if absent. */
const cJSON *tj_get(const cJSON *root, const char *dotted);
/* The string at dotted, or NULL (absent, null or not a string). */
const char *tj_str(const cJSON *root, const char *dotted);
/* The number at dotted, or -1 when absent or not a number. */
double tj_num(const cJSON *root, const char *dotted);
/* True when dotted is present and JSON null. */
bool tj_is_null(const cJSON *root, const char *dotted);

/* A JSON string literal (quotes included) for s, escaped by cJSON; malloc'd. */
char *tj_quote(const char *s);
/* A request body {"path": path, "content": content}; either may be NULL to
 * omit it.  malloc'd. */
char *tj_memory_body(const char *path, const char *content);
/* The text of a memstored `reply` fault (malloc'd) that answers count GETs
 * of memory asked_id in store (0: until cleared) with a document of its
 * own: memory id, path, content (its hash and size computed) and
 * version_id as given.  For answers the server would never send: another
 * memory's, an older version's. */
char *t_memory_reply_fault(const char *store, const char *asked_id, int count, const char *id,
                           const char *path, const char *content, const char *version_id);
/* SHA-256 lowercase hex of s (strlen bytes) into a static per-thread buffer. */
const char *t_sha(const char *s);
/* The "id" of a successful answer, malloc'd, or NULL. */
char *t_id(const struct tresp *r);

/* Checks an error answer: status, error.type, the envelope's type "error",
 * request_id present, "req_"-prefixed and equal to the request-id header.
 * Returns NULL when all hold, else a static description of the first
 * mismatch (for an assertion message). */
const char *t_check_error(const struct tresp *r, long status, const char *type);

/* Criterion helpers (the support library links Criterion). */
#define T_ASSERT_STATUS(r, st)                                                              \
    cr_assert_eq((r)->status, (long)(st), "expected HTTP %ld, got %ld: %s", (long)(st),      \
                 (r)->status, (r)->body ? (r)->body : "(no body)")
#define T_EXPECT_STATUS(r, st)                                                              \
    cr_expect_eq((r)->status, (long)(st), "expected HTTP %ld, got %ld: %s", (long)(st),      \
                 (r)->status, (r)->body ? (r)->body : "(no body)")
#define T_ASSERT_ERROR(r, st, type)                                                         \
    do {                                                                                    \
        const char *t_why_ = t_check_error((r), (st), (type));                              \
        cr_assert(t_why_ == NULL, "%s: %s", t_why_ ? t_why_ : "",                           \
                  (r)->body ? (r)->body : "(no body)");                                     \
    } while (0)
#define T_EXPECT_ERROR(r, st, type)                                                         \
    do {                                                                                    \
        const char *t_why_ = t_check_error((r), (st), (type));                              \
        cr_expect(t_why_ == NULL, "%s: %s", t_why_ ? t_why_ : "",                           \
                  (r)->body ? (r)->body : "(no body)");                                     \
    } while (0)

#endif
