/* http_err.c - the two translation tables of sync/ (HTTP status -> errno,
 * CURLcode -> errno), which of them are retried, and the retry timing
 * (retry-after headers, exponential backoff with jitter).
 *
 * Pure functions over constant tables: thread-safe, no state.  Every other
 * file of sync/ gets its errnos from here, so a status means the same thing
 * everywhere in the daemon. */
#include "http.h"
#include "http_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* HTTP status -> errno.  Exact statuses first; the class rows below cover
 * the rest.  409 is -EBUSY (conflict_error) here: api.c refines it to
 * -ESTALE (memory_precondition_failed_error) or -EEXIST
 * (memory_path_conflict_error) from the envelope's error.type. */
static const struct {
    long status;
    int err;
    bool retry;
} status_table[] = {
    {400, -EINVAL, false},     /* invalid_request_error */
    {401, -EACCES, false},     /* authentication_error */
    {402, -EACCES, false},     /* billing_error */
    {403, -EPERM, false},      /* permission_error */
    {404, -ENOENT, false},     /* not_found_error */
    {405, -EOPNOTSUPP, false},
    {408, -ETIMEDOUT, true},   /* request timeout: retried like the SDK */
    {409, -EBUSY, false},      /* refined by error.type in api.c */
    {412, -ESTALE, false},     /* precondition failed (tolerated on delete) */
    {413, -EFBIG, false},      /* request_too_large */
    {414, -ENAMETOOLONG, false},
    {422, -EINVAL, false},
    {429, -EAGAIN, true},      /* rate_limit_error */
    {500, -EIO, true},         /* api_error */
    {501, -EOPNOTSUPP, false},
    {502, -EIO, true},
    {503, -EAGAIN, true},
    {504, -ETIMEDOUT, true},   /* timeout_error */
    {529, -EAGAIN, true},      /* overloaded_error */
};

int http_status_errno(long status)
{
    if (status >= 200 && status < 300)
        return 0;
    for (size_t i = 0; i < sizeof(status_table) / sizeof(status_table[0]); i++)
        if (status_table[i].status == status)
            return status_table[i].err;
    if (status >= 500 && status < 600)
        return -EIO;
    if (status >= 400 && status < 500)
        return -EINVAL;
    return -EPROTO; /* 1xx/3xx as final answers, or no status at all */
}

bool http_status_retryable(long status)
{
    for (size_t i = 0; i < sizeof(status_table) / sizeof(status_table[0]); i++)
        if (status_table[i].status == status)
            return status_table[i].retry;
    return status >= 500 && status < 600;
}

/* CURLcode -> errno.  retry marks transport failures that a later attempt
 * may not see (the SDK retries every connection error and timeout). */
static const struct {
    CURLcode code;
    int err;
    bool retry;
} curl_table[] = {
    {CURLE_OK, 0, false},
    {CURLE_UNSUPPORTED_PROTOCOL, -EPROTONOSUPPORT, false},
    {CURLE_URL_MALFORMAT, -EINVAL, false},
    {CURLE_COULDNT_RESOLVE_PROXY, -EHOSTUNREACH, true},
    {CURLE_COULDNT_RESOLVE_HOST, -EHOSTUNREACH, true},
    {CURLE_COULDNT_CONNECT, -ECONNREFUSED, true},
    {CURLE_WEIRD_SERVER_REPLY, -EPROTO, false},
    {CURLE_HTTP2, -EPROTO, true},
    {CURLE_HTTP2_STREAM, -EPROTO, true},
    {CURLE_PARTIAL_FILE, -ECONNRESET, true},
    {CURLE_WRITE_ERROR, -EMSGSIZE, false}, /* only our size cap aborts a write */
    {CURLE_READ_ERROR, -EIO, false},
    {CURLE_OUT_OF_MEMORY, -ENOMEM, false},
    {CURLE_OPERATION_TIMEDOUT, -ETIMEDOUT, true},
    {CURLE_SSL_CONNECT_ERROR, -ECONNRESET, true},
    {CURLE_ABORTED_BY_CALLBACK, -ECANCELED, false},
    {CURLE_BAD_FUNCTION_ARGUMENT, -EINVAL, false},
    {CURLE_INTERFACE_FAILED, -EADDRNOTAVAIL, false},
    {CURLE_TOO_MANY_REDIRECTS, -ELOOP, false},
    {CURLE_GOT_NOTHING, -ECONNRESET, true},
    {CURLE_SEND_ERROR, -ECONNRESET, true},
    {CURLE_RECV_ERROR, -ECONNRESET, true},
    {CURLE_PEER_FAILED_VERIFICATION, -EKEYREJECTED, false},
    {CURLE_SSL_CERTPROBLEM, -EKEYREJECTED, false},
    {CURLE_SSL_CACERT_BADFILE, -EKEYREJECTED, false},
    {CURLE_BAD_CONTENT_ENCODING, -EPROTO, false},
    {CURLE_FILESIZE_EXCEEDED, -EMSGSIZE, false},
    {CURLE_USE_SSL_FAILED, -EPROTO, false},
    {CURLE_SEND_FAIL_REWIND, -EIO, true},
    {CURLE_LOGIN_DENIED, -EACCES, false},
    {CURLE_AGAIN, -EAGAIN, true},
    {CURLE_NO_CONNECTION_AVAILABLE, -EAGAIN, true},
    {CURLE_AUTH_ERROR, -EACCES, false},
    {CURLE_PROXY, -EHOSTUNREACH, true},
};

int http_curl_errno(int curlcode)
{
    for (size_t i = 0; i < sizeof(curl_table) / sizeof(curl_table[0]); i++)
        if ((int)curl_table[i].code == curlcode)
            return curl_table[i].err;
    return -EIO;
}

bool http_curl_retryable(int curlcode)
{
    for (size_t i = 0; i < sizeof(curl_table) / sizeof(curl_table[0]); i++)
        if ((int)curl_table[i].code == curlcode)
            return curl_table[i].retry;
    return false;
}

/* Parses s as a whole (leading/trailing blanks allowed) finite number. */
static bool parse_num(const char *s, double *out)
{
    if (!s)
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v))
        return false;
    while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
        end++;
    if (*end)
        return false;
    *out = v;
    return true;
}

static long usable_wait(double ms)
{
    if (!(ms > 0))
        return -1;
    if (ms > HTTP_RETRY_WAIT_MAX_MS)
        return -1;
    return (long)ceil(ms);
}

long http_retry_after_ms(const char *retry_after_ms, const char *retry_after, const char *date,
                         time_t now)
{
    double v;
    if (parse_num(retry_after_ms, &v) && v > 0)
        return usable_wait(v);
    if (parse_num(retry_after, &v))
        return usable_wait(v * 1000.0);
    if (retry_after && *retry_after) {
        /* A date is the server's clock: measured from the answer's Date
         * when it has one, so a local clock running ahead does not read
         * it as past (and retry into the limit at once). */
        time_t served = date && *date ? curl_getdate(date, NULL) : (time_t)-1;
        if (served != (time_t)-1)
            now = served;
        time_t when = curl_getdate(retry_after, NULL);
        if (when != (time_t)-1 && when > now)
            return usable_wait((double)(when - now) * 1000.0);
    }
    return -1;
}

long http_backoff_ms(long base_ms, long max_ms, int k, double u)
{
    double d = (double)base_ms;
    for (int i = 0; i < k && d < (double)max_ms; i++)
        d *= 2;
    if (d > (double)max_ms)
        d = (double)max_ms;
    if (u < 0)
        u = 0;
    if (u >= 1)
        u = 0.999999;
    d *= 1.0 - 0.25 * u;
    return d < 1 ? 1 : (long)d;
}
