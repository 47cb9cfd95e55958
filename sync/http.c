/* http.c - the HTTP client of memstorefs (interface and contract: http.h);
 * a run of calls on it is http_run.c.
 *
 * Owns:
 *  - libcurl's global state, initialised exactly once (pthread_once) and
 *    never cleaned up (other threads may still hold handles at exit);
 *  - per client (struct http_client, http_client.h): the immutable request
 *    settings (base URL, header lists with the credential, timeouts, retry
 *    policy), a CURLSH sharing the DNS and TLS-session caches between
 *    lanes, a pool of idle lanes, and the request budget every run obeys.
 *
 * A lane is one curl multi handle.  Its connection cache is what keeps
 * connections alive between calls.  A lane is used by one thread at a time:
 * a run pops one from the idle stack (or makes one), drives all its calls
 * on it, and pushes it back (LIFO, so a thread's sequential runs find the
 * warm connections they left).  Connections are deliberately not shared
 * through CURLSH: libcurl 7.88 does not support one connection cache used by
 * concurrent threads.
 *
 * The budget: a 429 pauses every request of the client until the server's
 * wait has passed; with max_per_minute, a token bucket (burst: a twelfth of
 * the minute's requests) spaces the starts.
 *
 * Locking: pool_lock guards idle/n_idle only and is never held across I/O;
 * budget_lock guards the budget's fields.  share_locks[] are libcurl's share
 * callbacks, one per curl_lock_data.  Allocation failures end in NULL or
 * -ENOMEM; nothing aborts. */
#include "http.h"

#include "http_client.h"
#include "json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LANES_IDLE_MAX 8

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int64_t http_date_ns(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = s && *s ? strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm) : NULL;
    if (!end || *end)
        return 0;
    time_t t = timegm(&tm);
    return t > 0 ? (int64_t)t * 1000000000LL : 0;
}

int64_t http_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access a, void *user)
{
    struct http_client *c = user;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&c->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *user)
{
    struct http_client *c = user;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&c->share_locks[data]);
}

/* Appends "name: value1value2" to *l, refusing CR/LF (header
 * injection).  The line is built in one allocation of its size and wiped
 * before it is freed: it may carry the credential (a buffer that grows
 * leaves copies behind in the memory it frees). */
static int add_header2(struct curl_slist **l, const char *name, const char *value1,
                       const char *value2)
{
    if (strpbrk(value1, "\r\n") || strpbrk(value2, "\r\n"))
        return -EINVAL;
    size_t len = strlen(name) + 2 + strlen(value1) + strlen(value2) + 1;
    char *s = malloc(len);
    if (!s)
        return -ENOMEM;
    snprintf(s, len, "%s: %s%s", name, value1, value2);
    struct curl_slist *n = curl_slist_append(*l, s);
    explicit_bzero(s, len);
    free(s);
    if (!n)
        return -ENOMEM;
    *l = n;
    return 0;
}

static int add_header(struct curl_slist **l, const char *name, const char *value)
{
    return add_header2(l, name, value, "");
}

/* Frees a header list, its lines wiped first (the credential's among them). */
static void free_headers(struct curl_slist *l)
{
    for (struct curl_slist *i = l; i; i = i->next)
        if (i->data)
            explicit_bzero(i->data, strlen(i->data));
    curl_slist_free_all(l);
}

static int build_headers(struct http_client *c, const struct http_opts *o)
{
    struct curl_slist **lists[2] = {&c->hdrs, &c->hdrs_body};
    for (int i = 0; i < 2; i++) {
        struct curl_slist **l = lists[i];
        int rc = add_header(l, "anthropic-beta", HTTP_BETA_HEADER);
        if (!rc)
            rc = add_header(l, "anthropic-version", HTTP_API_VERSION);
        if (!rc)
            rc = add_header(l, "accept", "application/json");
        if (!rc && o->api_key && *o->api_key)
            rc = add_header(l, "x-api-key", o->api_key);
        if (!rc && o->bearer && *o->bearer)
            rc = add_header2(l, "authorization", "Bearer ", o->bearer);
        if (!rc && i == 1)
            rc = add_header(l, "content-type", "application/json");
        /* No "Expect: 100-continue" round trip for larger bodies. */
        if (!rc) {
            struct curl_slist *n = curl_slist_append(*l, "Expect:");
            rc = n ? 0 : -ENOMEM;
            if (n)
                *l = n;
        }
        if (rc)
            return rc;
    }
    return 0;
}

struct http_client *http_client_new(const struct http_opts *o)
{
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) {
        errno = ENOMEM;
        return NULL;
    }
    if (!o || !o->base_url ||
        (strncmp(o->base_url, "http://", 7) != 0 && strncmp(o->base_url, "https://", 8) != 0) ||
        strpbrk(o->base_url, " \r\n\t?#")) {
        errno = EINVAL;
        return NULL;
    }
    struct http_client *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&c->pool_lock, NULL);
    pthread_mutex_init(&c->budget_lock, NULL);
    c->per_minute = o->max_per_minute > 0 ? o->max_per_minute : 0;
    c->tokens = c->per_minute / 12.0 > 1 ? c->per_minute / 12.0 : 1;
    c->tokens_at_ms = http_now_ms();
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->share_locks[i], NULL);
    c->base_url = strdup(o->base_url);
    int rc = c->base_url ? 0 : -ENOMEM;
    if (!rc) {
        size_t bl = strlen(c->base_url);
        while (bl > 0 && c->base_url[bl - 1] == '/')
            c->base_url[--bl] = '\0';
        rc = build_headers(c, o);
    }
    c->max_in_flight = o->max_in_flight > 0 ? o->max_in_flight : 8;
    c->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 60000;
    c->max_retries = o->max_retries >= 0 ? o->max_retries : 4;
    c->backoff_base_ms = o->backoff_base_ms > 0 ? o->backoff_base_ms : 500;
    c->backoff_max_ms = o->backoff_max_ms > 0 ? o->backoff_max_ms : 8000;
    if (c->backoff_max_ms < c->backoff_base_ms)
        c->backoff_max_ms = c->backoff_base_ms;
    if (!rc) {
        c->share = curl_share_init();
        if (!c->share ||
            curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
            curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
            curl_share_setopt(c->share, CURLSHOPT_USERDATA, c) != CURLSHE_OK ||
            curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
            curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
            rc = -ENOMEM;
    }
    if (rc) {
        http_client_free(&c);
        errno = -rc;
        return NULL;
    }
    return c;
}

void http_client_free(struct http_client **cp)
{
    if (!cp || !*cp)
        return;
    struct http_client *c = *cp;
    *cp = NULL;
    while (c->idle) {
        struct lane *l = c->idle;
        c->idle = l->next;
        curl_multi_cleanup(l->multi);
        free(l);
    }
    if (c->share)
        curl_share_cleanup(c->share);
    free_headers(c->hdrs);
    free_headers(c->hdrs_body);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&c->share_locks[i]);
    pthread_mutex_destroy(&c->pool_lock);
    pthread_mutex_destroy(&c->budget_lock);
    free(c->base_url);
    free(c);
}

struct lane *http_lane_get(struct http_client *c)
{
    pthread_mutex_lock(&c->pool_lock);
    struct lane *l = c->idle;
    if (l) {
        c->idle = l->next;
        c->n_idle--;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (l)
        return l;
    l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->multi = curl_multi_init();
    if (!l->multi) {
        free(l);
        return NULL;
    }
    curl_multi_setopt(l->multi, CURLMOPT_MAXCONNECTS, (long)c->max_in_flight);
    return l;
}

void http_lane_put(struct http_client *c, struct lane *l)
{
    pthread_mutex_lock(&c->pool_lock);
    if (c->n_idle < LANES_IDLE_MAX) {
        l->next = c->idle;
        c->idle = l;
        c->n_idle++;
        l = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (l) {
        curl_multi_cleanup(l->multi);
        free(l);
    }
}

bool http_budget_take(struct http_client *c, int64_t now, int64_t *next_ms)
{
    bool ok = true;
    pthread_mutex_lock(&c->budget_lock);
    if (now < c->pause_until_ms) {
        ok = false;
        *next_ms = c->pause_until_ms;
    } else if (c->per_minute > 0) {
        double burst = c->per_minute / 12.0 > 1 ? c->per_minute / 12.0 : 1;
        c->tokens += (double)(now - c->tokens_at_ms) * c->per_minute / 60000.0;
        if (c->tokens > burst)
            c->tokens = burst;
        c->tokens_at_ms = now;
        if (c->tokens >= 1) {
            c->tokens -= 1;
        } else {
            ok = false;
            *next_ms = now + (int64_t)((1 - c->tokens) * 60000.0 / c->per_minute) + 1;
        }
    }
    pthread_mutex_unlock(&c->budget_lock);
    return ok;
}

bool http_budget_pause(struct http_client *c, int64_t until_ms)
{
    pthread_mutex_lock(&c->budget_lock);
    bool fresh = c->pause_until_ms <= http_now_ms();
    if (until_ms > c->pause_until_ms)
        c->pause_until_ms = until_ms;
    pthread_mutex_unlock(&c->budget_lock);
    return fresh;
}

void http_client_budget(struct http_client *c, int64_t *paused_until_ms, int *waiting,
                        int *per_minute)
{
    pthread_mutex_lock(&c->budget_lock);
    *paused_until_ms = c->pause_until_ms > http_now_ms() ? c->pause_until_ms : 0;
    *waiting = c->waiting;
    *per_minute = c->per_minute;
    pthread_mutex_unlock(&c->budget_lock);
}

void http_budget_wait_add(struct http_client *c, int delta)
{
    pthread_mutex_lock(&c->budget_lock);
    c->waiting += delta;
    pthread_mutex_unlock(&c->budget_lock);
}

void http_client_cancel(struct http_client *c, bool on)
{
    if (c)
        __atomic_store_n(&c->cancel, on ? 1 : 0, __ATOMIC_SEQ_CST);
}

