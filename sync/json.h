/* json.h - sync/'s private text helpers: exact decoding of one top-level
 * string member (content may hold any UTF-8, NUL bytes included, which
 * cJSON cannot carry), percent-encoding for URLs, and the error envelope.
 * The buffer and the JSON string writer are the base library's (jbuf.h:
 * jbuf_add_json_str encodes content with an explicit length).
 *
 * Private to sync/: fs/ and cache/ never include it.  It includes no curl or
 * cJSON header, so the unit tests may include it directly. */
#ifndef MFS_SYNC_JSON_H
#define MFS_SYNC_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "jbuf.h"

/* Appends s percent-encoded: everything except A-Z a-z 0-9 - . _ ~ becomes
 * %XX.  Safe for a path segment and for a query value. */
int jbuf_add_pct(struct jbuf *b, const char *s);
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
