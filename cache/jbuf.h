/* jbuf.h - a growable text buffer and the one JSON string writer of
 * memstorefs: every layer that prints JSON (request bodies in sync/,
 * `status --json` and `conflicts --json` in fs/) writes its strings with
 * jbuf_add_json_str, so every string is escaped the same way.
 *
 * Part of the base library (mfs_base): no SQLite, curl, cJSON or FUSE. */
#ifndef MFS_JBUF_H
#define MFS_JBUF_H

#include <stdbool.h>
#include <stddef.h>

/* A growable, always NUL-terminated byte buffer.  Zero-initialise it
 * ({0}); jbuf_release frees the bytes.  After any append fails with
 * -ENOMEM the buffer stays valid but sticky-failed (oom set), so a caller
 * may append a sequence and check once.  Capped at 64 MiB. */
struct jbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

int jbuf_add(struct jbuf *b, const void *s, size_t n);
int jbuf_adds(struct jbuf *b, const char *s);
/* printf-style; only short fragments (under 512 bytes) are formatted. */
int jbuf_addf(struct jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends s (n bytes) as a JSON string literal, quotes included:
 * '"' and '\\' are escaped, \b \f \n \r \t by name, every other byte below
 * 0x20 (NUL included) and 0x7f as \u00XX; valid UTF-8 is copied as it is;
 * a byte that is not part of valid UTF-8 becomes \ufffd (JSON text cannot
 * carry it), so the output is always valid JSON.  Returns 0 or -ENOMEM. */
int jbuf_add_json_str(struct jbuf *b, const char *s, size_t n);
/* The same for a NUL-terminated string; NULL is written as null. */
int jbuf_add_json_cstr(struct jbuf *b, const char *s);

/* Hands the bytes over (caller frees); the buffer is emptied.  NULL if the
 * buffer failed or is empty and unallocated. */
char *jbuf_steal(struct jbuf *b);
void jbuf_release(struct jbuf *b);

#endif
