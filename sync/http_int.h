/* http_int.h - internals of the HTTP client shared by http.c and
 * http_err.c and exposed to the unit tests.  Private to sync/; no curl
 * header here. */
#ifndef MFS_SYNC_HTTP_INT_H
#define MFS_SYNC_HTTP_INT_H

#include <time.h>

/* The server's wait hint: retry-after-ms (milliseconds, may be fractional)
 * first, then retry-after (seconds, may be fractional, or an HTTP date
 * compared with now).  Either header may be NULL.  Returns the wait in ms,
 * or -1 when no usable hint: none, not positive, or past
 * HTTP_RETRY_WAIT_MAX_MS. */
long http_retry_after_ms(const char *retry_after_ms, const char *retry_after, const char *date,
                         time_t now);

/* Exponential backoff before retry number k (0 for the first retry):
 * min(base * 2^k, max) scaled by the jitter factor (1 - 0.25 * u), where
 * u is uniform in [0, 1). */
long http_backoff_ms(long base_ms, long max_ms, int k, double u);

#endif
