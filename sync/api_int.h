/* api_int.h - response parsing of the Memory Stores API, shared by api.c
 * and the unit tests.  Private to sync/.  Each parser takes the raw body
 * (so the tests can feed crafted JSON) and validates every field it uses:
 * a wrong type, a missing field, a bad hash or a length that does not
 * match content_size_bytes is -EPROTO with *what set to a static reason;
 * never a crash.  Outputs are left zeroed on failure. */
#ifndef MFS_SYNC_API_INT_H
#define MFS_SYNC_API_INT_H

#include "api.h"

/* One memory object as the whole body (create, update, retrieve).  full:
 * content must be a string and is decoded byte-exact (NUL included) and
 * checked against content_size_bytes and content_sha256. */
int apip_memory_doc(const char *body, size_t len, bool full, struct api_memory *m,
                    const char **what);
/* One page of a memory list: appends the memory items to acc (memory_prefix
 * items and unknown types are skipped), sets *next_page (malloc'd) or NULL
 * when there is no next page. */
int apip_memory_page(const char *body, size_t len, struct api_list *acc, char **next_page,
                     const char **what);
/* The same for a page of view=full: each memory's content is checked
 * (size, hash); an item whose content does not pass is left out, in
 * acc->skipped, like any malformed item. */
int apip_memory_page_view(const char *body, size_t len, bool full, struct api_list *acc,
                          char **next_page, const char **what);
/* The same, also keeping the path of each memory_prefix rollup in px
 * (when not NULL): a string "/.../" of at most 4096 bytes, else the page
 * is malformed. */
struct api_prefixes {
    char **v; /* malloc'd strings */
    size_t n;
};
int apip_memory_page_ex(const char *body, size_t len, bool full, struct api_list *acc,
                        struct api_prefixes *px, char **next_page, const char **what);
void apip_prefixes_free(struct api_prefixes *px);
int apip_store_doc(const char *body, size_t len, struct api_store *s, const char **what);
/* {"type":"memory_deleted",...}: checks it is an object of that type. */
int apip_deleted_doc(const char *body, size_t len, const char **what);
/* An RFC 3339 time ("2026-11-29T20:29:27.045Z", or with a +hh:mm offset)
 * in nanoseconds since the epoch; 0 when s is NULL or not such a time. */
int64_t apip_time_ns(const char *s);
/* Fills e from an error answer (any body, even non-JSON).  request_id is
 * the response header's value ("" when absent: the envelope's is used). */
void apip_error(long status, const char *body, size_t len, const char *request_id,
                struct api_error *e);

/* The path of a list page: view=full (20 a page) or basic (100), under
 * prefix (NULL: the whole store), depth=1 or not, at cursor (NULL: the
 * first page).  -ENOMEM when it could not be built (api_list.c). */
struct jbuf;
int apip_list_path(struct jbuf *p, const char *store_id, bool full, const char *prefix,
                   bool depth1, const char *cursor);

/* Shared by the request files (api.c, api_list.c, api_versions.c). */
bool api_id_ok(const char *id);
/* Fills e (when not NULL) and returns the errno of a finished call. */
int api_call_result(const struct http_call *call, struct api_error *e);
/* Fills e (when not NULL) for an answer refused on its content (type,
 * message what); returns -EPROTO. */
int api_refuse(const struct http_call *call, const char *type, const char *what,
               struct api_error *e);
/* Logs a malformed 2xx answer (one warn line) and returns -EPROTO. */
int api_malformed(const struct http_call *call, const char *what, struct api_error *e);

#endif
