/* rules.h - what a memory may be: the path, content and mount-slug rules of
 * the Memory Stores API (memory-store-api.md B.1-B.3, E), shared by the
 * daemon and by memstored so both sides refuse exactly the same things. */
#ifndef MFS_RULES_H
#define MFS_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MEM_PATH_MAX_BYTES 1024
#define MEM_PATH_MAX_SEGMENTS 20
#define MEM_CONTENT_MAX_BYTES 102400
/* The longest name of one file or directory in a mount: NAME_MAX, as on
 * every local filesystem (the API limits only the whole path). */
#define MEM_NAME_MAX_BYTES 255
#define MEM_MARKER_NAME ".anthropic-memory-store"
#define MEM_MARKER_PATH "/" MEM_MARKER_NAME

/* Decodes one code point of strict UTF-8 at s (n bytes left): its length
 * in bytes with *cp set, or 0 for an invalid or truncated sequence. */
size_t rules_utf8_next(const char *s, size_t n, uint32_t *cp);

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF,
 * no truncated sequence.  n bytes, NULs allowed (they are valid UTF-8). */
bool rules_utf8_valid(const char *s, size_t n);

/* A full memory path.  Returns 0, -ENAMETOOLONG (over 1,024 bytes) or
 * -EINVAL; *why (if not NULL) gets a static English reason. */
int rules_check_path(const char *path, size_t n, const char **why);

/* One path segment (a file or directory name), as FUSE hands it over.
 * Same errors as rules_check_path; the segment-count and total-length rules
 * are the caller's (they depend on the parent). */
int rules_check_segment(const char *name, const char **why);

/* A name made in a mount (create, mkdir, rename): rules_check_segment,
 * and at most MEM_NAME_MAX_BYTES bytes (-ENAMETOOLONG). */
int rules_check_name(const char *name, const char **why);

/* A memory path that can be a file in a mount: rules_check_path, every
 * name at most MEM_NAME_MAX_BYTES bytes (-ENAMETOOLONG), and not below the
 * marker (-EINVAL: a file at the root). */
int rules_check_local_path(const char *path, size_t n, const char **why);

/* A list path_prefix: "/" or a valid path followed by "/". */
int rules_check_prefix(const char *prefix, const char **why);

/* Content: 0, -EFBIG (over 102,400 bytes) or -EILSEQ (not UTF-8, or a
 * NUL byte, which the API refuses). */
int rules_check_content(const char *s, size_t n, const char **why);

/* The mount-path slug of a store name: lower-case, every run of characters
 * other than ASCII letters and digits becomes one '-', leading and trailing
 * '-' trimmed; an empty result falls back to fallback (the store id).
 * Returns a malloc'd string the caller frees, or NULL on ENOMEM. */
char *rules_slug(const char *name, const char *fallback);

/* The marker file's exact bytes: "version 1\n<store_id>".  Malloc'd. */
char *rules_marker_content(const char *store_id);

#endif
