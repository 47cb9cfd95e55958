/* session.h - where memstorefs gets its credential and endpoint, and the
 * session file that names the stores to mount (DESIGN.md "Command line",
 * memory-store-api.md C.1, D.1, E).
 *
 * All functions return 0 or a negative errno and, on failure, write one
 * clear English sentence into why (never a credential).  Thread-safe; they
 * read the environment, which the caller does not change meanwhile. */
#ifndef MFS_SYNC_SESSION_H
#define MFS_SYNC_SESSION_H

#include <stdbool.h>
#include <stddef.h>

#define MFS_DEFAULT_BASE_URL "https://api.anthropic.com"
#define SESSION_STORES_MAX 8
#define SESSION_MOUNT_ROOT "/mnt/memory"

struct mfs_cred {
    char *api_key;      /* sent as x-api-key, or NULL (malloc'd) */
    char *bearer;       /* sent as Authorization: Bearer, or NULL (malloc'd) */
    char *base_url;     /* never NULL after success, no trailing '/' (malloc'd) */
    const char *source; /* static: "ANTHROPIC_WORK_SECRET", "ANTHROPIC_API_KEY"
                         * or "ANTHROPIC_AUTH_TOKEN", for messages */
};

/* Reads the environment as the SDKs do:
 *  1. ANTHROPIC_WORK_SECRET: URL-safe base64 (padded or not) of
 *     {"sessions_token": "..."}; a non-empty token is a Bearer credential
 *     and wins.  A secret that does not decode, or holds no usable token,
 *     logs the warning "work item carried a secret payload but no sessions
 *     token could be extracted; falling back to the environment key" and
 *     the next sources are tried.
 *  2. ANTHROPIC_API_KEY (x-api-key); when ANTHROPIC_AUTH_TOKEN is set too
 *     the key wins and a warning says so.
 *  3. ANTHROPIC_AUTH_TOKEN (Bearer).
 * Empty variables count as unset.  ANTHROPIC_BASE_URL (http/https, trailing
 * '/' dropped) else MFS_DEFAULT_BASE_URL.
 * Returns 0, -ENOKEY (no credential at all), -EINVAL (bad base URL) or
 * -ENOMEM.  On failure *out is zeroed.  cred_clear releases it. */
int cred_from_env(struct mfs_cred *out, char *why, size_t whylen);
/* The same from explicit values (any may be NULL); cred_from_env is this
 * with getenv().  For tests and for callers with their own sources. */
int cred_resolve(const char *work_secret, const char *api_key, const char *auth_token,
                 const char *base_url, struct mfs_cred *out, char *why, size_t whylen);
void cred_clear(struct mfs_cred *c);
/* The same with a credentials file (credfile.c): KEY=VALUE lines whose
 * values win over the environment's.  Refused (-EPERM, with why) when the
 * file is readable or writable by its group or others, or belongs to
 * another user than the caller or root. */
int cred_from_file(const char *path, struct mfs_cred *out, char *why, size_t whylen);

/* Decodes a work secret.  *token gets a malloc'd copy of sessions_token
 * (caller frees).  Returns 0, -EINVAL (not base64, not a JSON object, no
 * non-empty string sessions_token) or -ENOMEM. */
int work_secret_token(const char *secret, char **token);

struct session_store {
    char *id;         /* memory_store_id (malloc'd) */
    char *name;       /* the resource's name, or the id when absent (malloc'd) */
    char *mount_path; /* given, or SESSION_MOUNT_ROOT "/" rules_slug(name, id),
                       * de-duplicated with "-2", "-3"... (malloc'd) */
    bool read_only;   /* access "read_only"; "read_write", null or absent: false */
};

/* Parses the session object as the API returns it ({"id":"sesn_...",
 * "resources":[...]}), a page of its resources list ({"data":[...],
 * "next_page":...}) or just its resources array.  Only entries with
 * type "memory_store" count; others are ignored.  Refused (-EINVAL, with
 * why): malformed JSON, a memory_store entry without a non-empty string
 * memory_store_id, an access other than read_only/read_write/null, a
 * mount_path that is not a clean absolute path (starts with '/', no '.'
 * or '..' segment, no empty segment), the same store or mount path twice,
 * more than SESSION_STORES_MAX stores.  *out (malloc'd array, NULL when
 * *n == 0) is freed with session_stores_free. */
int session_parse(const char *json, size_t len, struct session_store **out, size_t *n,
                  char *why, size_t whylen);
void session_stores_free(struct session_store *s, size_t n);

#endif
