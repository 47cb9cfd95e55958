/* sha256.c - content hashing through OpenSSL's one-shot EVP digest.
 *
 * The digest's implementation is fetched once, for every thread: given
 * EVP_sha256(), OpenSSL 3 looks it up again in its provider store at each
 * call (under a lock it shares with every thread), which cost more than
 * hashing a small file when it ran once per FLUSH (perf of the daemon).
 * A fetch that fails leaves the implicit lookup, as before. */
#include "sha256.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>

static EVP_MD *fetched; /* never freed: held until the process exits */
static pthread_once_t fetch_once = PTHREAD_ONCE_INIT;

static void fetch(void)
{
    fetched = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void sha256_hex(const void *data, size_t len, char out[SHA256_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[32];
    unsigned int mdlen = 0;

    pthread_once(&fetch_once, fetch);
    EVP_Digest(data ? data : "", len, md, &mdlen, fetched ? fetched : EVP_sha256(), NULL);
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
