/* log.c - the logging sink shared by fs/, sync/, cache/ and memstored.
 *
 * Values are written so that a line is one line of valid UTF-8 whatever
 * bytes a value holds (a path or an error message from a server): see
 * char_escape.
 *
 * Owns: the current level, the output stream and an optional tag.  Every
 * line is built in a local buffer and written with one fputs under a mutex,
 * so concurrent threads never interleave inside a line.  Level checks happen
 * before any formatting (log_enabled).  Once the daemon activates a log
 * target (a file, syslog or stderr: logsink.c), lines go there instead of
 * the stream. */
#include "log.h"
#include "log_int.h"
#include "rules.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static enum log_level cur_level = LOG_LVL_INFO;
static FILE *out_stream;
static char tag_buf[64];
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_set_level(enum log_level lvl)
{
    __atomic_store_n(&cur_level, lvl, __ATOMIC_RELAXED);
}

enum log_level log_get_level(void)
{
    return __atomic_load_n(&cur_level, __ATOMIC_RELAXED);
}

int log_parse_level(const char *s, enum log_level *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (s && strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    if (s && strcmp(s, "warning") == 0) {
        *out = LOG_LVL_WARN;
        return 0;
    }
    return -EINVAL;
}

void log_set_stream(FILE *f)
{
    pthread_mutex_lock(&out_lock);
    out_stream = f;
    pthread_mutex_unlock(&out_lock);
}

void log_lock(void)
{
    pthread_mutex_lock(&out_lock);
}

void log_unlock(void)
{
    pthread_mutex_unlock(&out_lock);
}

void log_set_tag(const char *tag)
{
    pthread_mutex_lock(&out_lock);
    if (tag)
        snprintf(tag_buf, sizeof(tag_buf), "%s", tag);
    else
        tag_buf[0] = '\0';
    pthread_mutex_unlock(&out_lock);
}

bool log_enabled(enum log_level lvl)
{
    return lvl <= log_get_level();
}

struct line {
    char buf[4096];
    size_t len;
    size_t body;    /* where "level=" starts (after the timestamp) */
};

/* Appends n bytes, or as many as fit (keeping room for "\n\0"). */
static void put(struct line *l, const char *s, size_t n)
{
    size_t room = sizeof(l->buf) - 2 - l->len;
    if (n > room)
        n = room;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

/* Appends n bytes only if all of them fit with `keep` bytes to spare (a
 * character, or an escape, is never cut in two).  False when they do not. */
static bool put_whole(struct line *l, const char *s, size_t n, size_t keep)
{
    if (l->len + n + keep + 2 > sizeof(l->buf))
        return false;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
    return true;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

/* How one character of a value at p (n bytes left) is written: *len bytes
 * taken from p; returns the escape to write instead (in esc), or NULL to
 * copy them.  Bytes from a server are written so that a line is always
 * valid UTF-8 with no control character: a byte that is not part of valid
 * UTF-8 is \xNN, a control character (C0, DEL, C1) and U+2028/U+2029
 * (line breaks to some readers) are escaped too. */
static const char *char_escape(const char *p, size_t n, size_t *len, char esc[12])
{
    unsigned char c = (unsigned char)*p;
    *len = 1;
    if (c == '"' || c == '\\') {
        esc[0] = '\\';
        esc[1] = (char)c;
        esc[2] = '\0';
        return esc;
    }
    if (c == '\n')
        return "\\n";
    if (c < 0x20 || c == 0x7f) {
        snprintf(esc, 12, "\\x%02x", c);
        return esc;
    }
    if (c < 0x80)
        return NULL;
    uint32_t cp;
    size_t k = rules_utf8_next(p, n, &cp);
    if (!k) {
        snprintf(esc, 12, "\\x%02x", c);
        return esc;
    }
    *len = k;
    if (cp <= 0x9f || cp == 0x2028 || cp == 0x2029) {
        snprintf(esc, 12, "\\u%04x", (unsigned)cp);
        return esc;
    }
    return NULL;
}

/* Appends v, quoted and escaped when it is empty or holds a space, quote,
 * '=', a control character or anything that is not valid UTF-8. */
static void put_value(struct line *l, const char *v)
{
    if (!v) {
        puts_(l, "-");
        return;
    }
    size_t n = strlen(v);
    bool quote = n == 0;
    for (size_t i = 0; i < n && !quote;) {
        char esc[12];
        size_t k = 1;
        if (v[i] == ' ' || v[i] == '=' || char_escape(v + i, n - i, &k, esc))
            quote = true;
        i += k;
    }
    if (!quote) {
        for (size_t i = 0, k; i < n; i += k) {
            char esc[12];
            char_escape(v + i, n - i, &k, esc);
            if (!put_whole(l, v + i, k, 0))
                break;
        }
        return;
    }
    if (!put_whole(l, "\"", 1, 1))
        return;
    for (size_t i = 0, k; i < n; i += k) {
        char esc[12];
        const char *e = char_escape(v + i, n - i, &k, esc);
        if (!(e ? put_whole(l, e, strlen(e), 1) : put_whole(l, v + i, k, 1)))
            break;
    }
    put(l, "\"", 1);
}

static void begin(struct line *l, enum log_level lvl)
{
    struct timeval tv;
    struct tm tm;
    char ts[64];

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof(ts) - n, ".%03dZ", (int)(tv.tv_usec / 1000));
    l->len = 0;
    puts_(l, "ts=");
    puts_(l, ts);
    puts_(l, " ");
    l->body = l->len;
    puts_(l, "level=");
    puts_(l, level_names[lvl]);
}

static void finish(struct line *l, enum log_level lvl)
{
    l->buf[l->len++] = '\n';
    l->buf[l->len] = '\0';
    pthread_mutex_lock(&out_lock);
    if (!logsink_write(lvl, l->buf, l->len, l->body)) {
        FILE *f = out_stream ? out_stream : stderr;
        fputs(l->buf, f);
        fflush(f);
    }
    pthread_mutex_unlock(&out_lock);
}

static void put_tag(struct line *l)
{
    /* tag_buf is written only at start-up, before threads exist. */
    if (tag_buf[0]) {
        puts_(l, " prog=");
        puts_(l, tag_buf);
    }
}

void log_event(enum log_level lvl, const char *msg, ...)
{
    if (!log_enabled(lvl))
        return;
    struct line l;
    begin(&l, lvl);
    put_tag(&l);
    puts_(&l, " msg=");
    put_value(&l, msg);

    va_list ap;
    va_start(ap, msg);
    for (;;) {
        const char *k = va_arg(ap, const char *);
        if (!k)
            break;
        const char *v = va_arg(ap, const char *);
        if (!v)
            continue;
        puts_(&l, " ");
        puts_(&l, k);
        puts_(&l, "=");
        put_value(&l, v);
    }
    va_end(ap);
    finish(&l, lvl);
}

void log_msgf(enum log_level lvl, const char *fmt, ...)
{
    if (!log_enabled(lvl))
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* Strip one trailing newline (libfuse's messages carry one). */
    size_t n = strlen(msg);
    if (n && msg[n - 1] == '\n')
        msg[n - 1] = '\0';
    log_event(lvl, msg, NULL);
}
