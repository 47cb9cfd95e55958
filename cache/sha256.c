/* sha256.c - content hashing through OpenSSL's one-shot EVP digest. */
#include "sha256.h"

#include <openssl/evp.h>
#include <string.h>

void sha256_hex(const void *data, size_t len, char out[SHA256_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[32];
    unsigned int mdlen = 0;

    EVP_Digest(data ? data : "", len, md, &mdlen, EVP_sha256(), NULL);
    for (unsigned int i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[SHA256_HEX_LEN] = '\0';
}

bool sha256_is_hex(const char *s)
{
    if (!s || strlen(s) != SHA256_HEX_LEN)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}
