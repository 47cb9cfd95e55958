/* log.c - the logging sink shared by fs/, sync/, cache/ and memstored.
 *
 * Owns: the current level, the output stream and an optional tag.  Every
 * line is built in a local buffer and written with one fputs under a mutex,
 * so concurrent threads never interleave inside a line.  Level checks happen
 * before any formatting (log_enabled).  Once the daemon activates a log
 * target (a file, syslog or stderr: logsink.c), lines go there instead of
 * the stream. */
#include "log.h"
#include "log_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
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

static void put(struct line *l, const char *s, size_t n)
{
    size_t room = sizeof(l->buf) - 2 - l->len; /* keep room for "\n\0" */
    if (n > room)
        n = room;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

/* Appends v, quoted and escaped when it is empty or holds a space, quote,
 * '=' or a control character. */
static void put_value(struct line *l, const char *v)
{
    if (!v) {
        puts_(l, "-");
        return;
    }
    bool quote = (*v == '\0');
    for (const char *p = v; *p && !quote; p++)
        if (*p == ' ' || *p == '"' || *p == '=' || (unsigned char)*p < 0x20)
            quote = true;
    if (!quote) {
        puts_(l, v);
        return;
    }
    puts_(l, "\"");
    for (const char *p = v; *p; p++) {
        unsigned char c = (unsigned char)*p;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(l, esc, 2);
        } else if (c == '\n') {
            puts_(l, "\\n");
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", c);
            puts_(l, esc);
        } else {
            put(l, (const char *)&c, 1);
        }
    }
    puts_(l, "\"");
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
