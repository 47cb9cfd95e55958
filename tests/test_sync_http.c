/* test_sync_http.c - the HTTP client (sync/http.h): the two translation
 * tables, the retry timing, and, against a real memstored, retries with
 * injected 429/500 faults, no retry of a 400, connection refused after
 * bounded retries, keep-alive, deadlines, a lost answer, and concurrent
 * use of one client from several threads. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "http.h"
#include "http_int.h"
#include "msd.h"

/* ---- unit: tables and timing ------------------------------------------- */

Test(tables, status)
{
    struct {
        long st;
        int err;
        bool retry;
    } rows[] = {
        {200, 0, false},           {201, 0, false},          {204, 0, false},
        {400, -EINVAL, false},     {401, -EACCES, false},    {403, -EPERM, false},
        {404, -ENOENT, false},     {408, -ETIMEDOUT, true},  {409, -EBUSY, false},
        {412, -ESTALE, false},     {413, -EFBIG, false},     {418, -EINVAL, false},
        {429, -EAGAIN, true},      {500, -EIO, true},        {502, -EIO, true},
        {503, -EAGAIN, true},      {504, -ETIMEDOUT, true},  {529, -EAGAIN, true},
        {599, -EIO, true},         {302, -EPROTO, false},    {0, -EPROTO, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        cr_expect_eq(http_status_errno(rows[i].st), rows[i].err, "status %ld", rows[i].st);
        cr_expect_eq(http_status_retryable(rows[i].st), rows[i].retry, "status %ld", rows[i].st);
    }
}

Test(tables, curlcode)
{
    struct {
        CURLcode cc;
        int err;
        bool retry;
    } rows[] = {
        {CURLE_OK, 0, false},
        {CURLE_COULDNT_CONNECT, -ECONNREFUSED, true},
        {CURLE_OPERATION_TIMEDOUT, -ETIMEDOUT, true},
        {CURLE_COULDNT_RESOLVE_HOST, -EHOSTUNREACH, true},
        {CURLE_GOT_NOTHING, -ECONNRESET, true},
        {CURLE_RECV_ERROR, -ECONNRESET, true},
        {CURLE_SEND_ERROR, -ECONNRESET, true},
        {CURLE_WRITE_ERROR, -EMSGSIZE, false},
        {CURLE_OUT_OF_MEMORY, -ENOMEM, false},
        {CURLE_URL_MALFORMAT, -EINVAL, false},
        {CURLE_PEER_FAILED_VERIFICATION, -EKEYREJECTED, false},
        {CURLE_ABORTED_BY_CALLBACK, -ECANCELED, false},
        {CURLE_WEIRD_SERVER_REPLY, -EPROTO, false},
        {CURLE_LDAP_SEARCH_FAILED, -EIO, false}, /* not in the table: default */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        cr_expect_eq(http_curl_errno((int)rows[i].cc), rows[i].err, "code %d", rows[i].cc);
        cr_expect_eq(http_curl_retryable((int)rows[i].cc), rows[i].retry, "code %d",
                     rows[i].cc);
    }
}

Test(timing, retry_after)
{
    time_t now = 1700000000;
    cr_expect_eq(http_retry_after_ms("1500", NULL, NULL, now), 1500);
    cr_expect_eq(http_retry_after_ms("250.5", "9", NULL, now), 251);
    cr_expect_eq(http_retry_after_ms(NULL, "2", NULL, now), 2000);
    cr_expect_eq(http_retry_after_ms(NULL, "0.5", NULL, now), 500);
    cr_expect_eq(http_retry_after_ms("0", "3", NULL, now), 3000);      /* ms must be > 0 */
    cr_expect_eq(http_retry_after_ms("junk", "1", NULL, now), 1000);
    /* Used whole up to 2^31 - 1 ms, as the API's SDK does (builds until 5
     * December 2026 capped it at 60 s); past that, left out. */
    cr_expect_eq(http_retry_after_ms(NULL, "1000", NULL, now), 1000000);
    cr_expect_eq(http_retry_after_ms("2147483647", NULL, NULL, now), 2147483647L);
    cr_expect_eq(http_retry_after_ms("2147483648", "5", NULL, now), -1);
    cr_expect_eq(http_retry_after_ms(NULL, "2147484", NULL, now), -1);
    cr_expect_eq(http_retry_after_ms(NULL, "garbage", NULL, now), -1);
    cr_expect_eq(http_retry_after_ms(NULL, NULL, NULL, now), -1);
    cr_expect_eq(http_retry_after_ms(NULL, "-4", NULL, now), -1);
    /* HTTP dates: 1700000005 is Tue, 14 Nov 2023 22:13:25 GMT. */
    cr_expect_eq(http_retry_after_ms(NULL, "Tue, 14 Nov 2023 22:13:25 GMT", NULL, now), 5000);
    cr_expect_eq(http_retry_after_ms(NULL, "Tue, 14 Nov 2023 22:13:15 GMT", NULL, now), -1);
    /* Measured from the answer's Date, not the local clock (here a
     * minute ahead of the server's); a Date that does not parse is
     * left out. */
    cr_expect_eq(http_retry_after_ms(NULL, "Tue, 14 Nov 2023 22:13:25 GMT",
                                     "Tue, 14 Nov 2023 22:13:20 GMT", now + 60), 5000);
    cr_expect_eq(http_retry_after_ms(NULL, "Tue, 14 Nov 2023 22:13:25 GMT", "junk", now), 5000);
}

Test(timing, backoff)
{
    cr_expect_eq(http_backoff_ms(500, 8000, 0, 0.0), 500);
    cr_expect_eq(http_backoff_ms(500, 8000, 1, 0.0), 1000);
    cr_expect_eq(http_backoff_ms(500, 8000, 3, 0.0), 4000);
    cr_expect_eq(http_backoff_ms(500, 8000, 4, 0.0), 8000);
    cr_expect_eq(http_backoff_ms(500, 8000, 40, 0.0), 8000);
    long j = http_backoff_ms(500, 8000, 2, 0.999);
    cr_expect(j >= 1500 && j < 2000, "jittered %ld", j);
    cr_expect_eq(http_backoff_ms(1000, 8000, 0, 0.5), 875);
}

/* ---- integration against memstored ------------------------------------ */

static struct msd srv;
static char *store;

static void up(void)
{
    cr_assert_eq(msd_start(&srv, NULL), 0, "memstored did not start");
    store = t_create_store(&srv, "http tests");
    cr_assert_not_null(store);
}

static void down(void)
{
    msd_stop(&srv);
    free(store);
    store = NULL;
}

static struct http_client *client(const char *key, int retries, long base_ms)
{
    struct http_opts o = {.base_url = srv.url, .api_key = key, .max_retries = retries,
                          .backoff_base_ms = base_ms, .backoff_max_ms = base_ms * 4,
                          .timeout_ms = 10000};
    struct http_client *c = http_client_new(&o);
    cr_assert_not_null(c);
    return c;
}

static void fault(const char *body)
{
    struct tresp r = {0};
    cr_assert_eq(t_admin(&srv, "POST", "/admin/faults", body, &r), 0);
    T_ASSERT_STATUS(&r, 200);
    tresp_free(&r);
}

static char *list_path(void)
{
    char *p;
    cr_assert(asprintf(&p, "/v1/memory_stores/%s/memories?limit=5", store) > 0);
    return p;
}

TestSuite(http, .init = up, .fini = down, .timeout = 60);

Test(http, plain_get)
{
    struct http_client *c = client("test-key", -1, 50);
    char *p = list_path();
    struct http_call call = {.method = "GET", .path = p};
    cr_assert_eq(http_run(c, &call, 1), 0, "err %d status %ld", call.err, call.status);
    cr_assert_eq(call.status, 200);
    cr_assert_eq(call.attempts, 1);
    cr_assert_not_null(call.resp);
    cr_assert(strstr(call.resp, "\"data\""), "%s", call.resp);
    cr_assert_eq(strncmp(call.request_id, "req_", 4), 0, "%s", call.request_id);
    http_call_clear(&call);
    cr_assert_null(call.resp);
    free(p);
    http_client_free(&c);
    cr_assert_null(c);
}

Test(http, retry_429_honours_retry_after)
{
    struct http_client *c = client("test-key", 4, 10);
    fault("{\"action\":\"status\",\"status\":429,\"retry_after\":1,\"count\":1,"
          "\"method\":\"GET\",\"path\":\"/v1/memory_stores/*/memories\"}");
    char *p = list_path();
    struct http_call call = {.method = "GET", .path = p};
    int64_t t0 = http_now_ms();
    cr_assert_eq(http_run(c, &call, 1), 0, "err %d", call.err);
    int64_t dt = http_now_ms() - t0;
    cr_assert_eq(call.attempts, 2);
    cr_assert_eq(call.status, 200);
    /* The 10 ms backoff would be far shorter: the header was obeyed. */
    cr_assert(dt >= 950, "waited only %lld ms", (long long)dt);
    cr_assert(dt < 5000, "waited %lld ms", (long long)dt);
    http_call_clear(&call);
    free(p);
    http_client_free(&c);
}

Test(http, retry_429_retry_after_ms)
{
    struct http_client *c = client("test-key", 4, 10);
    fault("{\"action\":\"status\",\"status\":429,\"retry_after_ms\":300,\"retry_after\":30,"
          "\"count\":1,\"method\":\"GET\"}");
    char *p = list_path();
    struct http_call call = {.method = "GET", .path = p};
    int64_t t0 = http_now_ms();
    cr_assert_eq(http_run(c, &call, 1), 0, "err %d", call.err);
    int64_t dt = http_now_ms() - t0;
    cr_assert_eq(call.attempts, 2);
    cr_assert(dt >= 280 && dt < 5000, "waited %lld ms", (long long)dt);
    http_call_clear(&call);
    free(p);
    http_client_free(&c);
}

/* A 429 on the last attempt pauses the budget too: the next call waits
 * for the server's retry-after instead of meeting the limit at once. */
Test(http, a_429_on_the_last_attempt_pauses_the_budget)
{
    struct http_client *c = client("test-key", 0, 10);
    fault("{\"action\":\"status\",\"status\":429,\"retry_after\":30,\"count\":1,"
          "\"method\":\"GET\"}");
    char *p = list_path();
    struct http_call call = {.method = "GET", .path = p};
    cr_assert_eq(http_run(c, &call, 1), -EAGAIN);
    cr_assert_eq(call.attempts, 1);
    int64_t until = 0, now = http_now_ms();
    int waiting = 0, per_minute = 0;
    http_client_budget(c, &until, &waiting, &per_minute);
    cr_expect(until >= now + 25000 && until <= now + 31000,
              "the budget is not paused for the server's 30 s (until %lld, now %lld)",
              (long long)until, (long long)now);
    http_call_clear(&call);
    free(p);
    http_client_free(&c);
}

/* One connection answered with fixed bytes, then closed: what memstored
 * cannot send (an answer cut inside its body). */
struct raw_srv {
    int lfd;
    const char *reply;
    pthread_t t;
};

static void *raw_main(void *arg)
{
    struct raw_srv *r = arg;
    int fd = accept(r->lfd, NULL, NULL);
    if (fd >= 0) {
        char buf[4096];
        size_t n = 0;
        ssize_t k;
        while (n < sizeof(buf) - 1 && (k = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0) {
            n += (size_t)k;
            buf[n] = 0;
            if (strstr(buf, "\r\n\r\n"))
                break;
        }
        if (write(fd, r->reply, strlen(r->reply)) < 0)
            perror("raw_main: write");
        close(fd);
    }
    return NULL;
}

static int raw_start(struct raw_srv *r, const char *reply)
{
    r->reply = reply;
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    cr_assert_eq(bind(r->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(r->lfd, 4), 0);
    cr_assert_eq(getsockname(r->lfd, (struct sockaddr *)&a, &al), 0);
    cr_assert_eq(pthread_create(&r->t, NULL, raw_main, r), 0);
    return ntohs(a.sin_port);
}

static void raw_stop(struct raw_srv *r)
{
    shutdown(r->lfd, SHUT_RDWR); /* (ends an accept still waiting) */
    pthread_join(r->t, NULL);
    close(r->lfd);
}

/* A 429 whose body the connection cuts short still carries its
 * retry-after in the headers, which came whole: the pause is the
 * server's, not the backoff (which was all it got before the fix: the
 * budget's pause ended 10-40 ms later). */
Test(http, a_429_cut_inside_its_body_keeps_its_retry_after)
{
    static struct raw_srv r; /* (its thread outlives a failed assertion's frame) */
    int port = raw_start(&r, "HTTP/1.1 429 Too Many Requests\r\nretry-after: 30\r\n"
                             "content-type: application/json\r\ncontent-length: 200\r\n\r\n"
                             "{\"type\":\"error\",\"er");
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    struct http_opts o = {.base_url = url, .api_key = "k", .max_retries = 0,
                          .backoff_base_ms = 10, .backoff_max_ms = 40, .timeout_ms = 10000};
    struct http_client *c = http_client_new(&o);
    cr_assert_not_null(c);
    struct http_call call = {.method = "GET", .path = "/v1/memory_stores"};
    cr_expect_neq(http_run(c, &call, 1), 0);
    cr_expect_eq(call.status, 429);
    int64_t until = 0, now = http_now_ms();
    int waiting = 0, per_minute = 0;
    http_client_budget(c, &until, &waiting, &per_minute);
    cr_expect(until >= now + 25000 && until <= now + 31000,
              "the pause is not the server's 30 s (until %lld, now %lld)", (long long)until,
              (long long)now);
    http_call_clear(&call);
    http_client_free(&c);
    raw_stop(&r);
}

Test(http, retry_500_then_success)
{
    struct http_client *c = client("test-key", 4, 10);
    fault("{\"action\":\"status\",\"status\":500,\"count\":2,\"method\":\"GET\"}");
    char *p = list_path();
    struct http_call call = {.method = "GET", .path = p};
    cr_assert_eq(http_run(c, &call, 1), 0, "err %d", call.err);
    cr_assert_eq(call.attempts, 3);
    cr_assert_eq(call.status, 200);
    http_call_clear(&call);
    free(p);
    http_client_free(&c);
}

Test(http, retries_exhausted)
{
    struct http_client *c = client("test-key", 2, 10);
    fault("{\"action\":\"status\",\"status\":500,\"count\":0,\"method\":\"GET\"}");
    char *p = list_path();
    struct http_call call = {.method = "GET", .path = p};
    cr_assert_eq(http_run(c, &call, 1), -EIO);
    cr_assert_eq(call.attempts, 3);
    cr_assert_eq(call.status, 500);
    cr_assert_not_null(call.resp, "the last answer's body is kept");
    http_call_clear(&call);
    struct tresp r = {0};
    t_admin(&srv, "DELETE", "/admin/faults", NULL, &r);
    tresp_free(&r);
    fault("{\"action\":\"status\",\"status\":429,\"count\":0,\"method\":\"GET\"}");
    cr_assert_eq(http_run(c, &call, 1), -EAGAIN);
    cr_assert_eq(call.attempts, 3);
    http_call_clear(&call);
    free(p);
    http_client_free(&c);
}

Test(http, bad_request_not_retried)
{
    struct http_client *c = client("test-key", 4, 10);
    char *p;
    cr_assert(asprintf(&p, "/v1/memory_stores/%s/memories?limit=500", store) > 0);
    struct http_call call = {.method = "GET", .path = p};
    cr_assert_eq(http_run(c, &call, 1), -EINVAL);
    cr_assert_eq(call.status, 400);
    cr_assert_eq(call.attempts, 1);
    http_call_clear(&call);
    free(p);
    http_client_free(&c);
}

Test(http, wrong_key_is_eacces)
{
    struct http_client *c = client("nope", 4, 10);
    char *p = list_path();
    struct http_call call = {.method = "GET", .path = p};
    cr_assert_eq(http_run(c, &call, 1), -EACCES);
    cr_assert_eq(call.status, 401);
    cr_assert_eq(call.attempts, 1);
    http_call_clear(&call);
    free(p);
    http_client_free(&c);
}

Test(http, bearer_is_accepted)
{
    struct http_opts o = {.base_url = srv.url, .bearer = "test-key"};
    struct http_client *c = http_client_new(&o);
    cr_assert_not_null(c);
    char *p = list_path();
    struct http_call call = {.method = "GET", .path = p};
    cr_assert_eq(http_run(c, &call, 1), 0, "err %d status %ld", call.err, call.status);
    http_call_clear(&call);
    free(p);
    http_client_free(&c);
}

static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd); /* nothing listens there now */
    return ntohs(a.sin_port);
}

Test(http, connection_refused_bounded)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", closed_port());
    struct http_opts o = {.base_url = url, .api_key = "k", .max_retries = 3,
                          .backoff_base_ms = 20, .backoff_max_ms = 50,
                          .connect_timeout_ms = 1000};
    struct http_client *c = http_client_new(&o);
    cr_assert_not_null(c);
    struct http_call call = {.method = "GET", .path = "/v1/memory_stores"};
    int64_t t0 = http_now_ms();
    cr_assert_eq(http_run(c, &call, 1), -ECONNREFUSED);
    int64_t dt = http_now_ms() - t0;
    cr_assert_eq(call.attempts, 4);
    cr_assert_eq(call.status, 0);
    cr_assert(dt >= 40, "backoff not applied: %lld ms", (long long)dt);
    cr_assert(dt < 3000, "took %lld ms", (long long)dt);
    http_call_clear(&call);
    http_client_free(&c);
}

Test(http, keep_alive_reuses_connection)
{
    struct http_client *c = client("test-key", 0, 10);
    char *p = list_path();
    int conns = 0;
    for (int i = 0; i < 20; i++) {
        struct http_call call = {.method = "GET", .path = p};
        cr_assert_eq(http_run(c, &call, 1), 0);
        conns += call.new_conns;
        http_call_clear(&call);
    }
    cr_assert(conns >= 1 && conns <= 2, "20 sequential calls opened %d connections", conns);
    free(p);
    http_client_free(&c);
}

Test(http, many_in_one_run)
{
    struct http_opts o = {.base_url = srv.url, .api_key = "test-key", .max_in_flight = 4};
    struct http_client *c = http_client_new(&o);
    char *p = list_path();
    struct http_call calls[40];
    memset(calls, 0, sizeof(calls));
    for (int i = 0; i < 40; i++)
        calls[i] = (struct http_call){.method = "GET", .path = p};
    cr_assert_eq(http_run(c, calls, 40), 0);
    int conns = 0;
    for (int i = 0; i < 40; i++) {
        cr_assert_eq(calls[i].status, 200);
        conns += calls[i].new_conns;
        http_call_clear(&calls[i]);
    }
    cr_assert(conns <= 4, "max_in_flight 4 opened %d connections", conns);
    free(p);
    http_client_free(&c);
}

/* A batch larger than max_in_flight waits for room without spinning, and
 * never has more than max_in_flight requests out at once. */
Test(http, batch_waits_without_spinning)
{
    struct http_opts o = {.base_url = srv.url, .api_key = "test-key", .max_in_flight = 4};
    struct http_client *c = http_client_new(&o);
    fault("{\"action\":\"latency\",\"latency_ms\":50,\"count\":0,\"method\":\"GET\"}");
    char *p = list_path();
    enum { N = 80 };
    struct http_call calls[N];
    memset(calls, 0, sizeof(calls));
    for (int i = 0; i < N; i++)
        calls[i] = (struct http_call){.method = "GET", .path = p};
    clock_t cpu0 = clock();
    int64_t t0 = http_now_ms();
    cr_assert_eq(http_run(c, calls, N), 0);
    int64_t dt = http_now_ms() - t0;
    double cpu = (double)(clock() - cpu0) / CLOCKS_PER_SEC;
    /* 80 calls of >= 50 ms, 4 at a time: at least 20 rounds. */
    cr_assert(dt >= 900, "80 slow calls with max_in_flight 4 took only %lld ms", (long long)dt);
    cr_assert(cpu < 0.5 * (double)dt / 1000.0, "used %.2f s of CPU in %lld ms", cpu,
              (long long)dt);
    for (int i = 0; i < N; i++)
        http_call_clear(&calls[i]);
    free(p);
    http_client_free(&c);
}

Test(http, deadline_and_cancel)
{
    struct http_client *c = client("test-key", 4, 10);
    fault("{\"action\":\"latency\",\"latency_ms\":3000,\"count\":0,\"method\":\"GET\"}");
    char *p = list_path();
    struct http_call call = {.method = "GET", .path = p};
    int64_t t0 = http_now_ms();
    struct http_run_opts ro = {.deadline_ms = t0 + 300};
    cr_assert_eq(http_run_ex(c, &call, 1, &ro), -ETIMEDOUT);
    int64_t dt = http_now_ms() - t0;
    cr_assert(dt >= 250 && dt < 1500, "took %lld ms", (long long)dt);
    cr_assert_eq(call.attempts, 1, "the request in flight counts as sent");
    http_call_clear(&call);
    volatile int cancel = 1;
    struct http_run_opts ro2 = {.cancel = &cancel};
    cr_assert_eq(http_run_ex(c, &call, 1, &ro2), -ECANCELED);
    cr_assert_eq(call.attempts, 0);
    http_call_clear(&call);
    free(p);
    http_client_free(&c);
}

/* A thread's cancel flag ends the runs of that thread only: one store's
 * final sync is cut off at its timeout while another store's sync, on
 * another thread of the same client, goes on. */
struct scoped {
    struct http_client *c;
    const char *path;
    const volatile int *flag;
    int err, attempts;
};

static void *scoped_main(void *arg)
{
    struct scoped *t = arg;
    http_thread_cancel(t->flag);
    struct http_call call = {.method = "GET", .path = t->path};
    http_run(t->c, &call, 1);
    t->err = call.err;
    t->attempts = call.attempts;
    http_call_clear(&call);
    http_thread_cancel(NULL);
    return NULL;
}

Test(http, a_thread_s_cancel_ends_its_runs_only)
{
    struct http_client *c = client("test-key", 2, 10);
    fault("{\"action\":\"latency\",\"latency_ms\":1500,\"count\":2,\"method\":\"GET\"}");
    char *p = list_path();
    volatile int flag = 0;
    struct scoped t[2] = {{.c = c, .path = p, .flag = &flag}, {.c = c, .path = p}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, scoped_main, &t[i]), 0);
    usleep(300 * 1000); /* both in flight (if not yet, the first still ends cancelled) */
    __atomic_store_n(&flag, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_expect_eq(t[0].err, -ECANCELED, "the flagged thread's run: %d", t[0].err);
    cr_expect_eq(t[1].err, 0, "the other thread's run was ended: %d", t[1].err);
    /* A flag already set: nothing is sent.  Without it, the run goes. */
    struct scoped again = {.c = c, .path = p, .flag = &flag};
    scoped_main(&again);
    cr_expect_eq(again.err, -ECANCELED);
    cr_expect_eq(again.attempts, 0);
    again.flag = NULL;
    scoped_main(&again);
    cr_expect_eq(again.err, 0, "a run without the flag: %d", again.err);
    free(p);
    http_client_free(&c);
}

/* A create whose answer is lost is retried; the retry finds the memory it
 * made itself (409 path conflict naming that memory). */
Test(http, lost_answer_is_retried)
{
    struct http_client *c = client("test-key", 2, 10);
    fault("{\"action\":\"drop_after_commit\",\"count\":1,\"method\":\"POST\"}");
    struct api_memory m;
    struct api_error e = {0};
    int rc = api_memory_create(c, store, "/lost.md", "x", 1, &m, &e);
    cr_assert_eq(rc, -EEXIST, "rc %d status %ld %s", rc, e.status, e.type);
    cr_assert_str_eq(e.type, "memory_path_conflict_error");
    cr_assert_str_neq(e.conflicting_memory_id, "");
    api_error_clear(&e);
    http_client_free(&c);
}

struct thr {
    struct http_client *c;
    const char *path;
    int ok;
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    for (int i = 0; i < 15; i++) {
        struct http_call calls[3];
        memset(calls, 0, sizeof(calls));
        for (int k = 0; k < 3; k++)
            calls[k] = (struct http_call){.method = "GET", .path = t->path};
        if (http_run(t->c, calls, 3) == 0)
            t->ok++;
        for (int k = 0; k < 3; k++)
            http_call_clear(&calls[k]);
    }
    return NULL;
}

Test(http, threads_share_one_client)
{
    struct http_client *c = client("test-key", 2, 10);
    char *p = list_path();
    pthread_t th[4];
    struct thr t[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (struct thr){.c = c, .path = p};
        cr_assert_eq(pthread_create(&th[i], NULL, thr_main, &t[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(t[i].ok, 15, "thread %d: %d of 15 runs succeeded", i, t[i].ok);
    }
    free(p);
    http_client_free(&c);
}

Test(http, invalid_calls)
{
    struct http_client *c = client("test-key", 0, 10);
    struct http_call call = {.method = "GET", .path = "no-slash"};
    cr_assert_eq(http_run(c, &call, 1), -EINVAL);
    cr_assert_eq(call.err, -EINVAL);
    cr_assert_eq(call.attempts, 0);
    cr_assert_eq(http_run(c, NULL, 0), 0);
    http_client_free(&c);
    struct http_opts o = {.base_url = "ftp://x"};
    cr_assert_null(http_client_new(&o));
    cr_assert_eq(errno, EINVAL);
}

/* on_done: a call sent again as it ends, up to 5 times, while the run's
 * other call is still in flight; a call sent again with a path that
 * cannot be sent ends -EINVAL without a second callback. */
struct again {
    int ends, slow_ends, bad_ends, ends_before_slow;
    const char *bad;
};

static bool send_again_cb(void *arg, struct http_call *call)
{
    struct again *a = arg;
    if (strstr(call->path, "limit=1")) {
        a->slow_ends++;
        return false;
    }
    if (call->path == a->bad) {
        a->bad_ends++;
        return false;
    }
    cr_assert_eq(call->status, 200);
    cr_assert_not_null(call->resp);
    if (!a->slow_ends)
        a->ends_before_slow++;
    if (++a->ends == 5) {
        call->path = a->bad;
        return true;
    }
    return a->ends < 5;
}

Test(http, a_call_sent_again_as_it_ends)
{
    struct http_client *c = client("test-key", -1, 50);
    fault("{\"action\":\"latency\",\"latency_ms\":1000,\"count\":0,\"method\":\"GET\","
          "\"query\":\"limit=1\"}");
    char *fast = list_path(), *slow;
    cr_assert(asprintf(&slow, "/v1/memory_stores/%s/memories?limit=1", store) > 0);
    struct again a = {.bad = "no-slash"};
    struct http_call calls[2] = {{.method = "GET", .path = slow}, {.method = "GET", .path = fast}};
    struct http_run_opts ro = {.on_done = send_again_cb, .arg = &a};
    cr_assert_eq(http_run_ex(c, calls, 2, &ro), -EINVAL);
    cr_expect_eq(a.ends, 5, "the fast call ended %d times", a.ends);
    cr_expect_eq(a.slow_ends, 1);
    cr_expect_eq(a.ends_before_slow, 5, "the fast call waited for the slow one");
    cr_expect_eq(a.bad_ends, 0, "the call that cannot be sent was handed back");
    cr_expect_eq(calls[0].err, 0);
    cr_expect_eq(calls[1].err, -EINVAL);
    cr_expect_eq(t_route_count(&srv, "GET /v1/memory_stores/{id}/memories"), 6);
    http_call_clear(&calls[0]);
    http_call_clear(&calls[1]);
    free(fast);
    free(slow);
    http_client_free(&c);
}

/* A retry that comes due while the budget is paused waits for the pause
 * without spinning.  Before the fix the due retry's time (already past)
 * was the loop's next wake-up: it polled with a zero timeout, flat out,
 * until the server's retry-after ran out. */
Test(http, a_due_retry_held_by_a_pause_waits_without_spinning)
{
    struct http_client *c = client("test-key", 4, 100);
    char *one = NULL, *f = NULL;
    cr_assert(asprintf(&one, "/v1/memory_stores/%s", store) > 0);
    cr_assert(asprintf(&f, "{\"action\":\"status\",\"status\":503,\"count\":1,"
                           "\"method\":\"GET\",\"path\":\"%s\"}", one) > 0);
    fault(f);
    fault("{\"action\":\"status\",\"status\":429,\"retry_after\":2,\"count\":1,"
          "\"method\":\"GET\",\"path\":\"/v1/memory_stores/*/memories\"}");
    char *p = list_path();
    struct http_call calls[2] = {{.method = "GET", .path = one}, {.method = "GET", .path = p}};
    clock_t cpu0 = clock();
    int64_t t0 = http_now_ms();
    cr_assert_eq(http_run(c, calls, 2), 0, "errs %d %d", calls[0].err, calls[1].err);
    int64_t dt = http_now_ms() - t0;
    double cpu = (double)(clock() - cpu0) / CLOCKS_PER_SEC;
    cr_assert_eq(calls[0].attempts, 2);
    cr_assert_eq(calls[1].attempts, 2);
    cr_assert(dt >= 1500, "the pause was not kept: %lld ms", (long long)dt);
    cr_expect(cpu < 0.25 * (double)dt / 1000.0, "used %.2f s of CPU in %lld ms", cpu,
              (long long)dt);
    for (int i = 0; i < 2; i++)
        http_call_clear(&calls[i]);
    free(p);
    free(f);
    free(one);
    http_client_free(&c);
}
