/* http.h - the one HTTP client of memstorefs (libcurl inside, not exposed).
 *
 * A client holds the endpoint, the credential and a pool of connection
 * "lanes" (each a curl multi handle with its own keep-alive connection
 * cache).  http_run() borrows a lane, runs a batch of calls with at most
 * max_in_flight transfers at once, retries what is worth retrying, and
 * gives the lane back, so connections are reused across calls and across
 * http_run invocations.
 *
 * Thread safety: any number of threads may call http_run on one client at
 * once (each borrows its own lane; the pool is behind a mutex).  Creating
 * and freeing the client is not concurrent with anything else.
 *
 * Errors: 0 or a negative errno.  HTTP statuses and CURLcodes are turned
 * into errnos by one table each (http_status_errno, http_curl_errno); the
 * API layer (api.h) refines 409 by error.type.
 *
 * Credentials are sent as headers and never logged. */
#ifndef MFS_SYNC_HTTP_H
#define MFS_SYNC_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_BETA_HEADER "agent-memory-2026-07-22"
#define HTTP_API_VERSION "2023-06-01"
#define HTTP_RESP_MAX (4u << 20)   /* a response body past this fails with -EMSGSIZE */
/* The longest server wait hint used (2^31 - 1 ms, as the API's own SDK):
 * a longer or non-positive one is left out, and the backoff applies. */
#define HTTP_RETRY_WAIT_MAX_MS 2147483647L

struct http_client; /* opaque */

struct http_opts {
    const char *base_url; /* required, http:// or https://; a trailing '/' is dropped */
    const char *api_key;  /* sent as x-api-key; may be NULL */
    const char *bearer;   /* sent as Authorization: Bearer; may be NULL */
    int max_in_flight;    /* per http_run; 0 -> 8 */
    long connect_timeout_ms, timeout_ms; /* per attempt; 0 -> 10000, 60000 */
    int max_retries;                     /* <0 -> 4 (so 5 attempts); 0 = none */
    long backoff_base_ms, backoff_max_ms; /* 0 -> 500, 8000 */
    int max_per_minute;   /* requests started per minute, every run together
                           * (0: no cap) */
};

/* Copies everything it needs from o.  Returns NULL with errno set (EINVAL
 * for a missing/invalid base_url, ENOMEM).  Free with http_client_free. */
struct http_client *http_client_new(const struct http_opts *o);
/* Frees the client and NULLs *c; NULL and *c == NULL are fine.  No
 * http_run may be running on it. */
void http_client_free(struct http_client **c);

struct http_call {
    /* in (borrowed for the duration of http_run): */
    const char *method;  /* "GET", "POST", "DELETE", ... */
    const char *path;    /* path + query, starting with '/', already encoded */
    const char *body;    /* NULL: no body (a POST then sends an empty one) */
    size_t body_len;
    /* out: */
    long status;         /* last HTTP status, 0 if no response arrived */
    int err;             /* 0 on 2xx; else a negative errno (see the tables) */
    char *resp;          /* body of the last response, NUL-terminated, or NULL;
                          * owned by the call: http_call_clear frees it */
    size_t resp_len;
    int attempts;        /* requests that may have reached the server: one per
                          * attempt, and each resend libcurl made on its own
                          * (>= 1 unless cancelled before starting) */
    int new_conns;       /* connections opened for this call (keep-alive check) */
    char request_id[64]; /* request-id response header (or "") */
    char date[64];       /* Date response header: the server's clock (or "") */
};

/* Limits of one http_run; a zeroed struct (or NULL) means none. */
struct http_run_opts {
    int64_t deadline_ms;        /* CLOCK_MONOTONIC ms (http_now_ms); 0 = none.
                                 * Calls not finished by then end -ETIMEDOUT
                                 * and no retry is scheduled past it. */
    const volatile int *cancel; /* when it reads non-zero, unfinished calls
                                 * end -ECANCELED */
    /* Called on the running thread as each call ends with its result
     * (not for the calls a cancel or the deadline ends), so that the
     * caller can take it while the others are still in flight.  Returning
     * true sends the call again as a new one, at once: its in fields may
     * have changed (a path it points to must live until the call's next
     * end or the run's), its out fields are reset (what the callback keeps
     * of resp it takes: call->resp = NULL).  A call that cannot be sent
     * (no method, bad path) ends -EINVAL without a second callback. */
    bool (*on_done)(void *arg, struct http_call *call);
    void *arg;
};

/* Runs the n calls (each call's out fields are reset first).  Returns 0
 * when every call ended 2xx, else the err of the first call that did not.
 * Each call carries its own result, also when the batch cannot start at
 * all (a call without method or with a path not starting with '/' gives
 * every call -EINVAL; no memory gives -ENOMEM), so callers may look only
 * at call->err. */
int http_run(struct http_client *c, struct http_call *calls, size_t n);
/* While on, every run in progress or started on c ends its unfinished
 * calls with -ECANCELED at once (unless its run options carry a cancel
 * flag of their own).  Used to bound the final sync at unmount. */
void http_client_cancel(struct http_client *c, bool on);
/* Scopes a cancel to the calling thread: while flag (not NULL) reads
 * non-zero, the runs this thread starts (on any client) end their
 * unfinished calls with -ECANCELED, as the client's cancel would, and the
 * other threads' runs go on.  NULL removes it.  One store's sync sets its
 * store's flag for its length (sync/engine.c), so that the final sync's
 * timeout cuts off that store's requests and no other's. */
void http_thread_cancel(const volatile int *flag);
int http_run_ex(struct http_client *c, struct http_call *calls, size_t n,
                const struct http_run_opts *ro);
/* Frees call->resp and zeroes the out fields; the in fields are kept. */
void http_call_clear(struct http_call *call);

/* The translation tables.  http_status_errno: 0 for 2xx, else the errno a
 * status stands for (409 gives -EBUSY here; the API layer refines it).
 * http_curl_errno takes a CURLcode as int (curl.h stays private). */
int http_status_errno(long status);
int http_curl_errno(int curlcode);
/* Whether a status / CURLcode is worth another attempt. */
bool http_status_retryable(long status);
bool http_curl_retryable(int curlcode);

/* The client's request budget, shared by every run: each request starts
 * within --max-requests-per-minute (a token bucket, bursts of a twelfth of
 * it), and a 429 pauses every request of every run until its retry-after
 * (or backoff).  For status: the pause's end (0: none), how many calls the
 * budget holds now, and the cap (0: none). */
void http_client_budget(struct http_client *c, int64_t *paused_until_ms, int *waiting,
                        int *per_minute);

/* Monotonic milliseconds, the clock of http_run_opts.deadline_ms. */
int64_t http_now_ms(void);
/* An HTTP date ("Tue, 01 Dec 2026 03:54:52 GMT") in ns since the epoch;
 * 0 when s is empty or not such a date. */
int64_t http_date_ns(const char *s);

#endif
