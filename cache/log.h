/* log.h - one logging sink for every layer of memstorefs.
 *
 * A line is logfmt: ts=... level=... msg="..." key=value ...  Values that
 * contain spaces, quotes or '=' are quoted.  Callers never pass credentials.
 * Thread-safe: one line is written with a single locked fputs. */
#ifndef MFS_LOG_H
#define MFS_LOG_H

#include <stdbool.h>
#include <stdio.h>

enum log_level { LOG_LVL_ERROR = 0, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

void log_set_level(enum log_level lvl);
enum log_level log_get_level(void);
/* Parses "error|warn|info|debug"; returns 0 or -EINVAL. */
int log_parse_level(const char *s, enum log_level *out);
/* Where lines go (default stderr).  The stream is not closed by log. */
void log_set_stream(FILE *f);
/* Prefix every line with name=VALUE (e.g. the program name); NULL clears. */
void log_set_tag(const char *tag);
bool log_enabled(enum log_level lvl);

/* The daemon's log target (logsink.c).  spec: "-" (stderr), "syslog" (the
 * local syslog socket: /dev/log, or MEMSTOREFS_SYSLOG_SOCKET), or a file
 * path (opened for append, created 0600).  Opening checks it: 0, or a
 * negative errno with the reason in why.  Lines keep going to the stream
 * until log_target_activate().  log_target_reopen() reopens a file (or
 * reconnects to syslog), e.g. on SIGHUP after logrotate moved the file. */
int log_target_open(const char *spec, const char *ident, char *why, size_t whylen);
void log_target_activate(void);
int log_target_reopen(char *why, size_t whylen);
void log_target_close(void);
bool log_target_is_stderr(void);
/* The syslog socket in use: MEMSTOREFS_SYSLOG_SOCKET, else /dev/log. */
const char *log_syslog_socket(void);

/* Logs msg followed by key/value string pairs, terminated by NULL:
 *   log_event(LOG_LVL_WARN, "failed to upload memory", "path", p, NULL);
 * A pair whose value is NULL is left out. */
void log_event(enum log_level lvl, const char *msg, ...) __attribute__((sentinel));
/* Same, with the message formatted printf-style and no fields. */
void log_msgf(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_event(LOG_LVL_ERROR, __VA_ARGS__, NULL)
#define log_warn(...) log_event(LOG_LVL_WARN, __VA_ARGS__, NULL)
#define log_info(...) log_event(LOG_LVL_INFO, __VA_ARGS__, NULL)
#define log_debug(...) log_event(LOG_LVL_DEBUG, __VA_ARGS__, NULL)

#endif
