/* http_client.h - the state of an HTTP client, shared by the two halves of
 * the client inside sync/: http.c (the client: its settings, header lists,
 * lanes and request budget) and http_run.c (a run of calls on a lane).
 * Private to those two files; the interface is http.h. */
#ifndef MFS_SYNC_HTTP_CLIENT_H
#define MFS_SYNC_HTTP_CLIENT_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct lane {
    CURLM *multi;
    struct lane *next;
};

struct http_client {
    char *base_url;
    struct curl_slist *hdrs;      /* common headers, credential included */
    struct curl_slist *hdrs_body; /* the same plus content-type */
    int max_in_flight, max_retries;
    long connect_timeout_ms, timeout_ms, backoff_base_ms, backoff_max_ms;
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
    pthread_mutex_t pool_lock; /* guards idle, n_idle */
    struct lane *idle;
    int n_idle;
    unsigned seed_ctr; /* atomic; varies the jitter seed between runs */
    volatile int cancel; /* http_client_cancel: ends every run's unfinished calls */
    /* The request budget, shared by every run (budget_lock):  */
    pthread_mutex_t budget_lock;
    int64_t pause_until_ms; /* a 429 pauses every request until then */
    int per_minute;         /* 0: no cap */
    double tokens;          /* requests that may start now (burst: per_minute / 12) */
    int64_t tokens_at_ms;
    int waiting;            /* calls held by the budget now, every run together */
};

/* A lane for one run: an idle one (the last put back first, with its warm
 * connections) or a new one; NULL when out of memory. */
struct lane *http_lane_get(struct http_client *c);
/* Back to the idle stack (a few kept, with their connections; the rest freed). */
void http_lane_put(struct http_client *c, struct lane *l);

/* May a request start now?  Takes one from the budget when it may; else
 * *next_ms says when it might. */
bool http_budget_take(struct http_client *c, int64_t now, int64_t *next_ms);
/* A 429 pauses every request of the client until until_ms.  True when this
 * starts a pause (none was running), to log once per pause. */
bool http_budget_pause(struct http_client *c, int64_t until_ms);
/* Calls held by the budget, every run together (status): adds delta. */
void http_budget_wait_add(struct http_client *c, int delta);

#endif
