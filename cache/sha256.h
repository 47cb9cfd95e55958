/* sha256.h - SHA-256 as lowercase hex, the form content_sha256 takes. */
#ifndef MFS_SHA256_H
#define MFS_SHA256_H

#include <stdbool.h>
#include <stddef.h>

#define SHA256_HEX_LEN 64

/* Writes the 64 hex digits and a NUL into out. */
void sha256_hex(const void *data, size_t len, char out[SHA256_HEX_LEN + 1]);
/* True when s is exactly 64 lowercase hex digits. */
bool sha256_is_hex(const char *s);

#endif
