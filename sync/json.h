/* json.h - sync/'s private text helpers: a growable buffer, JSON string
 * encoding with an explicit length (content may hold any UTF-8, NUL bytes
 * included, which cJSON cannot carry), exact decoding of one top-level
 * string member, percent-encoding for URLs, and the error envelope.
 *
 * Private to sync/: fs/ and cache/ never include it.  It includes no curl or
 * cJSON header, so the unit tests may include it directly. */
#ifndef MFS_SYNC_JSON_H
#define MFS_SYNC_JSON_H

#include <stdbool.h>
#include <stddef.h>

/* A growable, always NUL-terminated byte buffer.  Zero-initialise it
 * ({0}); jbuf_release frees the bytes.  After any append fails with
 * -ENOMEM the buffer stays valid but sticky-failed (oom set), so a caller
 * may append a sequence and check once. */
struct jbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

int jbuf_add(struct jbuf *b, const void *s, size_t n);
int jbuf_adds(struct jbuf *b, const char *s);
int jbuf_addf(struct jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s (n bytes) as a JSON string literal, quotes included:
 * '"' and '\\' are escaped, \b \f \n \r \t by name, every other byte below
 * 0x20 (NUL included) and 0x7f as \u00XX; bytes >= 0x80 are copied (the
 * caller guarantees valid UTF-8).  Returns 0 or -ENOMEM. */
int jbuf_add_json_str(struct jbuf *b, const char *s, size_t n);
/* Appends s percent-encoded: everything except A-Z a-z 0-9 - . _ ~ becomes
 * %XX.  Safe for a path segment and for a query value. */
int jbuf_add_pct(struct jbuf *b, const char *s);
/* Hands the bytes over (caller frees); the buffer is emptied.  NULL if the
 * buffer failed or is empty and unallocated. */
char *jbuf_steal(struct jbuf *b);
void jbuf_release(struct jbuf *b);

/* Finds the member `key` of the top-level JSON object in json (len bytes)
 * and decodes its string value exactly, \u0000 and surrogate pairs
 * included.  *out (malloc'd, NUL-terminated, caller frees) and *outlen get
 * the bytes.  Returns 0, -ENOENT (no such member, or it is null),
 * -EPROTO (malformed JSON, not an object, the value is not a string, or
 * an escape is invalid) or -ENOMEM. */
int json_top_string(const char *json, size_t len, const char *key, char **out, size_t *outlen);

/* Best-effort read of an error envelope {"type":"error","error":{"type",
 * "message"},"request_id"} for log lines: each output is set to "" when
 * absent.  Never fails. */
void json_error_brief(const char *body, size_t len, char *type, size_t typelen, char *msg,
                      size_t msglen, char *rid, size_t ridlen);

#endif
