/* http_run.c - a run of HTTP calls on one lane of a client (http_run_ex,
 * http.h): sending, retrying, budget, deadline, cancel; the client itself
 * is http.c.
 *
 * One run is a small state machine per call (struct slot):
 *   WAIT --(not_before reached, fewer than max_in_flight running)--> RUN
 *   RUN  --(retryable failure, attempts left, before the deadline)--> WAIT
 *   RUN  --(anything else)--> DONE;  WAIT/RUN --(cancel, deadline)--> DONE
 *   DONE --(the run's on_done sends it again, a new call)--> WAIT
 * Each attempt gets a fresh easy handle; the connection survives in the
 * lane's cache.  Every slot ends DONE with call->err set.
 *
 * Nothing here is shared between threads: slots live on the runner's heap,
 * and the client's shared parts are reached through http_client.h.
 *
 * Memory: response bodies are capped at HTTP_RESP_MAX (the write callback
 * refuses more and the call ends -EMSGSIZE).  Allocation failures end the
 * affected call with -ENOMEM; nothing aborts. */
#include "http.h"

#include "http_client.h"
#include "http_int.h"
#include "json.h"
#include "log.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

enum slot_state { S_WAIT, S_RUN, S_DONE };

struct slot {
    struct http_call *call;
    enum slot_state st;
    CURL *easy;
    int64_t not_before;
    struct jbuf body; /* the current attempt's response */
    bool too_big;
    int should_retry; /* x-should-retry: -1 absent, 0 false, 1 true */
    char ra_ms[32], ra[64], rid[64], date[64];
    char errbuf[CURL_ERROR_SIZE];
    int sends; /* times this attempt's request headers went out (libcurl
                * resends on a fresh connection by itself when a kept-alive
                * one closed without an answer) */
};

struct run {
    struct http_client *c;
    int held;        /* this run's calls held by the budget (counted in c->waiting) */
    struct lane *lane;
    struct slot *slots;
    size_t n, done, running;
    size_t fresh;    /* slots[fresh..n) have never been started */
    size_t retrying; /* slots below fresh waiting in S_WAIT for a retry */
    unsigned seed;
    const volatile int *tcancel; /* the starting thread's flag, or NULL */
};

static size_t on_body(char *p, size_t size, size_t nmemb, void *user)
{
    struct slot *s = user;
    size_t n = size * nmemb;
    if (s->body.len + n > HTTP_RESP_MAX) {
        s->too_big = true;
        return 0;
    }
    if (jbuf_add(&s->body, p, n))
        return 0;
    return n;
}

static void header_value(char *dst, size_t dlen, const char *v, size_t vn)
{
    while (vn && (*v == ' ' || *v == '\t'))
        v++, vn--;
    while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' '))
        vn--;
    if (vn >= dlen)
        vn = dlen - 1;
    memcpy(dst, v, vn);
    dst[vn] = '\0';
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *user)
{
    struct slot *s = user;
    size_t n = size * nmemb;
    if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) { /* a new response (after 1xx) */
        s->ra_ms[0] = s->ra[0] = s->rid[0] = s->date[0] = '\0';
        s->should_retry = -1;
        return n;
    }
    const char *colon = memchr(p, ':', n);
    if (!colon)
        return n;
    size_t kn = (size_t)(colon - p), vn = n - kn - 1;
    const char *v = colon + 1;
    if (kn == 14 && strncasecmp(p, "retry-after-ms", kn) == 0) {
        header_value(s->ra_ms, sizeof(s->ra_ms), v, vn);
    } else if (kn == 11 && strncasecmp(p, "retry-after", kn) == 0) {
        header_value(s->ra, sizeof(s->ra), v, vn);
    } else if (kn == 4 && strncasecmp(p, "date", kn) == 0) {
        header_value(s->date, sizeof(s->date), v, vn);
    } else if (kn == 10 && strncasecmp(p, "request-id", kn) == 0) {
        header_value(s->rid, sizeof(s->rid), v, vn);
    } else if (kn == 14 && strncasecmp(p, "x-should-retry", kn) == 0) {
        char b[16];
        header_value(b, sizeof(b), v, vn);
        s->should_retry = strcasecmp(b, "true") == 0 ? 1 : strcasecmp(b, "false") == 0 ? 0 : -1;
    }
    return n;
}

/* The path without its query, for log lines (query values are data). */
static void log_path(char *dst, size_t dlen, const char *path)
{
    size_t n = strcspn(path, "?");
    if (n >= dlen)
        n = dlen - 1;
    memcpy(dst, path, n);
    dst[n] = '\0';
}

/* Counts each time the request goes out on the wire: libcurl resends a
 * request whose reused connection died before any answer, without telling
 * its caller, and a write the server committed before that must not be
 * taken for someone else's (reconcile.c, "lost answers").  A proxy's
 * CONNECT (https_proxy) goes out as headers too, and is no sending of
 * the request. */
static int on_debug(CURL *h, curl_infotype type, char *data, size_t size, void *user)
{
    struct slot *s = user;
    if (type == CURLINFO_HEADER_OUT && !(size >= 8 && memcmp(data, "CONNECT ", 8) == 0))
        s->sends++;
    return 0;
}

static int start_attempt(struct run *r, struct slot *s)
{
    struct http_client *c = r->c;
    struct http_call *call = s->call;
    struct jbuf url = {0};
    jbuf_adds(&url, c->base_url);
    jbuf_adds(&url, call->path);
    if (url.oom) {
        jbuf_release(&url); /* what it holds before running out */
        return -ENOMEM;
    }
    CURL *e = curl_easy_init();
    if (!e) {
        jbuf_release(&url);
        return -ENOMEM;
    }
    jbuf_release(&s->body);
    s->too_big = false;
    s->should_retry = -1;
    s->ra_ms[0] = s->ra[0] = s->rid[0] = s->date[0] = s->errbuf[0] = '\0';
    s->sends = 0;

    CURLcode rc = curl_easy_setopt(e, CURLOPT_URL, url.p);
    jbuf_release(&url); /* libcurl copied it */
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_SHARE, c->share);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "memstorefs/" MFS_VERSION);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, s);
    curl_easy_setopt(e, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(e, CURLOPT_DEBUGDATA, s);
    curl_easy_setopt(e, CURLOPT_VERBOSE, 1L); /* only feeds on_debug */
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, call->body ? c->hdrs_body : c->hdrs);
    if (strcmp(call->method, "GET") == 0) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
        if (strcmp(call->method, "POST") != 0)
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, call->method);
        if (call->body || strcmp(call->method, "POST") == 0) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                             (curl_off_t)(call->body ? call->body_len : 0));
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, call->body ? call->body : "");
        }
    }
    if (rc != CURLE_OK || curl_multi_add_handle(r->lane->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        return -ENOMEM;
    }
    s->easy = e;
    s->st = S_RUN;
    r->running++;
    return 0;
}

static void finish_slot(struct run *r, struct slot *s, long status, int err)
{
    struct http_call *call = s->call;
    call->status = status;
    call->err = err;
    call->resp_len = s->body.len;
    call->resp = s->body.len ? jbuf_steal(&s->body) : NULL;
    jbuf_release(&s->body);
    snprintf(call->request_id, sizeof(call->request_id), "%s", s->rid);
    snprintf(call->date, sizeof(call->date), "%s", s->date);
    s->st = S_DONE;
    r->done++;
    if (!err)
        return;

    char path[256], st[16], att[16], type[64] = "", msg[256] = "", rid[64] = "";
    log_path(path, sizeof(path), call->path);
    snprintf(st, sizeof(st), "%ld", status);
    snprintf(att, sizeof(att), "%d", call->attempts);
    if (status >= 400)
        json_error_brief(call->resp, call->resp_len, type, sizeof(type), msg, sizeof(msg), rid,
                         sizeof(rid));
    const char *req_id = call->request_id[0] ? call->request_id : rid;
    if (status >= 400 && status < 500 && !http_status_retryable(status)) {
        /* 404/409/412 are ordinary answers the sync engine acts on. */
        bool expected = status == 404 || status == 409 || status == 412;
        log_event(expected ? LOG_LVL_INFO : LOG_LVL_WARN, "the server refused a request",
                  "method", call->method, "path", path, "status", st, "error_type", type,
                  "error", msg, "request_id", req_id, NULL);
    } else {
        log_warn("HTTP request failed", "method", call->method, "path", path, "status",
                 status ? st : NULL, "errno", strerror(-err), "detail",
                 s->errbuf[0] ? s->errbuf : (msg[0] ? msg : NULL), "attempts", att,
                 "request_id", req_id[0] ? req_id : NULL);
    }
}

static void end_attempt(struct run *r, struct slot *s, CURLcode cc, const struct http_run_opts *ro)
{
    struct http_client *c = r->c;
    struct http_call *call = s->call;
    long status = 0, nconn = 0;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(s->easy, CURLINFO_NUM_CONNECTS, &nconn);
    curl_multi_remove_handle(r->lane->multi, s->easy);
    curl_easy_cleanup(s->easy);
    s->easy = NULL;
    r->running--;
    call->attempts += s->sends > 1 ? s->sends : 1;
    call->new_conns += (int)nconn;

    int err;
    bool retry;
    if (cc != CURLE_OK) {
        err = s->too_big ? -EMSGSIZE : (s->body.oom ? -ENOMEM : http_curl_errno((int)cc));
        retry = !s->too_big && !s->body.oom && http_curl_retryable((int)cc);
    } else {
        err = http_status_errno(status);
        retry = err && http_status_retryable(status);
        if (err && s->should_retry >= 0)
            retry = s->should_retry == 1;
    }
    bool give_up = !err || !retry || call->attempts > c->max_retries;
    if (give_up && status != 429) {
        finish_slot(r, s, status, err);
        return;
    }
    /* A 429 cut short inside its body still had its headers whole: its
     * retry-after counts (it used to get only the backoff). */
    long wait = cc == CURLE_OK || status == 429
                    ? http_retry_after_ms(s->ra_ms, s->ra, s->date, time(NULL))
                    : -1;
    if (wait < 0) {
        double u = (double)rand_r(&r->seed) / ((double)RAND_MAX + 1.0);
        wait = http_backoff_ms(c->backoff_base_ms, c->backoff_max_ms, call->attempts - 1, u);
    }
    int64_t at = http_now_ms() + wait;
    if (status == 429) {
        /* The budget is the server's: every request waits, not only this
         * one, and also after a last attempt (the next call must not meet
         * the same limit at once). */
        if (http_budget_pause(c, at) && log_enabled(LOG_LVL_INFO)) {
            char w[24];
            snprintf(w, sizeof(w), "%ld", wait);
            log_info("the server limits the rate (429); every request waits", "wait_ms", w);
        }
    }
    if (give_up || (ro && ro->deadline_ms && at >= ro->deadline_ms)) {
        finish_slot(r, s, status, err);
        return;
    }
    if (log_enabled(LOG_LVL_INFO)) {
        char path[256], st[16], w[24], att[16];
        log_path(path, sizeof(path), call->path);
        snprintf(st, sizeof(st), "%ld", status);
        snprintf(w, sizeof(w), "%ld", wait);
        snprintf(att, sizeof(att), "%d", call->attempts);
        log_info("retrying HTTP request", "method", call->method, "path", path, "status",
                 status ? st : NULL, "errno", strerror(-err), "attempt", att, "wait_ms", w);
    }
    jbuf_release(&s->body);
    s->not_before = at;
    s->st = S_WAIT;
    r->retrying++;
}

/* Whether a call can be sent: a method and a path starting with '/',
 * neither with a character that would break the request line. */
static bool call_sendable(const struct http_call *call)
{
    return call->method && call->path && call->path[0] == '/' &&
           !strpbrk(call->path, " \r\n\t") && !strpbrk(call->method, " \r\n\t:");
}

/* A call its caller sends again (http_run_opts.on_done): a new call in
 * the same slot, started by the next pass like a retry that is due. */
static void send_again(struct run *r, struct slot *s)
{
    struct http_call *call = s->call;
    http_call_clear(call);
    if (!call_sendable(call)) {
        call->err = -EINVAL;
        return;
    }
    s->st = S_WAIT;
    s->not_before = 0;
    r->done--;
    r->retrying++;
}

/* Ends every unfinished call with err (cancel or deadline). */
static void abort_all(struct run *r, int err)
{
    for (size_t i = 0; i < r->n; i++) {
        struct slot *s = &r->slots[i];
        if (s->st == S_DONE)
            continue;
        long status = 0;
        if (s->st == S_RUN) { /* sent: the server may have applied it */
            curl_multi_remove_handle(r->lane->multi, s->easy);
            curl_easy_cleanup(s->easy);
            s->easy = NULL;
            r->running--;
            s->call->attempts += s->sends > 1 ? s->sends : 1;
        }
        jbuf_release(&s->body);
        finish_slot(r, s, status, err);
    }
}

/* How many of this run's calls the budget holds now (for status). */
static void budget_held(struct run *r, int held)
{
    if (held == r->held)
        return;
    http_budget_wait_add(r->c, held - r->held);
    r->held = held;
}

/* The calling thread's cancel flag (http_thread_cancel). */
static __thread const volatile int *thread_cancel;

void http_thread_cancel(const volatile int *flag)
{
    thread_cancel = flag;
}

/* Whether a run is cancelled: by its own flag (or its client's), or by
 * the flag of the thread that started it. */
static bool cancelled(const struct run *r, const struct http_run_opts *ro)
{
    return (ro->cancel && *ro->cancel) || (r->tcancel && *r->tcancel);
}

static void drive(struct run *r, const struct http_run_opts *ro)
{
    struct http_client *c = r->c;
    while (r->done < r->n) {
        int64_t now = http_now_ms();
        if (cancelled(r, ro)) {
            abort_all(r, -ECANCELED);
            break;
        }
        if (ro && ro->deadline_ms && now >= ro->deadline_ms) {
            abort_all(r, -ETIMEDOUT);
            break;
        }
        /* Due retries first, then slots never started, in order, each
         * within the client's budget.  Only retries are scanned, so a large
         * batch costs O(n) in all. */
        size_t max = (size_t)c->max_in_flight;
        int64_t budget_next = 0;
        bool held = false;
        for (size_t i = 0; r->retrying && i < r->fresh && r->running < max && !held; i++) {
            struct slot *s = &r->slots[i];
            if (s->st != S_WAIT || s->not_before > now)
                continue;
            if (!http_budget_take(c, now, &budget_next)) {
                held = true;
                break;
            }
            r->retrying--;
            int rc = start_attempt(r, s);
            if (rc)
                finish_slot(r, s, 0, rc);
        }
        while (!held && r->fresh < r->n && r->running < max) {
            if (!http_budget_take(c, now, &budget_next)) {
                held = true;
                break;
            }
            struct slot *s = &r->slots[r->fresh++];
            int rc = start_attempt(r, s);
            if (rc)
                finish_slot(r, s, 0, rc);
        }
        budget_held(r, held ? (int)(r->n - r->done - r->running) : 0);
        if (r->done == r->n)
            break;
        int still = 0;
        CURLMcode mc = curl_multi_perform(r->lane->multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(r->lane->multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE)
                continue;
            struct slot *s = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            CURLcode cc = m->data.result;
            end_attempt(r, s, cc, ro);
            if (s->st == S_DONE && ro && ro->on_done && ro->on_done(ro->arg, s->call))
                send_again(r, s);
        }
        if (mc != CURLM_OK) {
            log_warn("HTTP multi handle failed", "error", curl_multi_strerror(mc));
            abort_all(r, -EIO);
            break;
        }
        if (r->done == r->n)
            break;
        /* Sleep until curl has work, the next retry is due, or (when a
         * transfer ended and left room) start the next slot at once.  A
         * budget that held a start back holds every start until
         * budget_next, a retry already due included: waking before it
         * would only spin. */
        now = http_now_ms();
        int64_t next = now + 1000;
        for (size_t i = 0; r->retrying && r->running < max && i < r->fresh; i++)
            if (r->slots[i].st == S_WAIT && r->slots[i].not_before < next)
                next = r->slots[i].not_before;
        if (r->fresh < r->n && r->running < max)
            next = held ? budget_next : now;
        if (held && next < budget_next)
            next = budget_next;
        if (ro && ro->deadline_ms && ro->deadline_ms < next)
            next = ro->deadline_ms;
        int64_t wait = next - now;
        if (wait > 100) /* a cancel is seen within 100 ms */
            wait = 100;
        if (wait < 0)
            wait = 0;
        if (wait > 0 || r->running > 0)
            curl_multi_poll(r->lane->multi, NULL, 0, (int)wait, NULL);
    }
}

/* A batch that cannot start: every call ends with err, none is sent. */
static int set_all(struct http_call *calls, size_t n, int err)
{
    for (size_t i = 0; i < n; i++)
        calls[i].err = err;
    return err;
}

int http_run(struct http_client *c, struct http_call *calls, size_t n)
{
    return http_run_ex(c, calls, n, NULL);
}

int http_run_ex(struct http_client *c, struct http_call *calls, size_t n,
                const struct http_run_opts *ro)
{
    if (n && !calls)
        return -EINVAL;
    int rc = c ? 0 : -EINVAL;
    for (size_t i = 0; i < n; i++) {
        http_call_clear(&calls[i]);
        if (!call_sendable(&calls[i]))
            rc = -EINVAL;
    }
    if (n == 0 || rc)
        return set_all(calls, n, rc);
    /* Without a cancel flag of its own, a run obeys the client's. */
    struct http_run_opts with_cancel;
    if (!ro || !ro->cancel) {
        with_cancel = ro ? *ro : (struct http_run_opts){0};
        with_cancel.cancel = &c->cancel;
        ro = &with_cancel;
    }
    struct run r = {.c = c, .n = n, .tcancel = thread_cancel};
    if (cancelled(&r, ro))
        return set_all(calls, n, -ECANCELED);
    r.slots = calloc(n, sizeof(*r.slots));
    r.lane = http_lane_get(c);
    if (!r.slots || !r.lane) {
        free(r.slots);
        if (r.lane)
            http_lane_put(c, r.lane);
        return set_all(calls, n, -ENOMEM);
    }
    r.seed = (unsigned)time(NULL) ^ (unsigned)getpid() ^
             (__atomic_fetch_add(&c->seed_ctr, 1, __ATOMIC_RELAXED) * 2654435761u);
    for (size_t i = 0; i < n; i++) {
        r.slots[i].call = &calls[i];
        r.slots[i].st = S_WAIT;
        r.slots[i].should_retry = -1;
    }
    drive(&r, ro);
    budget_held(&r, 0);
    http_lane_put(c, r.lane);
    free(r.slots);
    for (size_t i = 0; i < n; i++)
        if (calls[i].err)
            return calls[i].err;
    return 0;
}

void http_call_clear(struct http_call *call)
{
    if (!call)
        return;
    free(call->resp);
    call->resp = NULL;
    call->resp_len = 0;
    call->status = 0;
    call->err = 0;
    call->attempts = 0;
    call->new_conns = 0;
    call->request_id[0] = '\0';
    call->date[0] = '\0';
}
