/* sha256.h -- SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) in plain C: the rendezvous proves the
 * job secret with them (common/rendezvous.h). Checked against the FIPS 180-2 and RFC 4231 vectors
 * (tests/test_rendezvous.c). Not constant-time in the key's length, which is not secret. */
#ifndef LONGCTX_SHA256_H
#define LONGCTX_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32

typedef struct {
    uint32_t h[8];
    uint64_t bytes;          /* message length so far */
    unsigned char buf[64];   /* the block being filled */
    size_t used;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *p, size_t n);
void sha256_final(Sha256 *s, unsigned char out[SHA256_BYTES]); /* s is wiped */
void sha256(const void *p, size_t n, unsigned char out[SHA256_BYTES]);

typedef struct {
    Sha256 inner, outer;     /* keyed with key ^ ipad, key ^ opad */
} HmacSha256;

void hmac_sha256_init(HmacSha256 *h, const void *key, size_t klen);
void hmac_sha256_update(HmacSha256 *h, const void *p, size_t n);
void hmac_sha256_final(HmacSha256 *h, unsigned char out[SHA256_BYTES]); /* h is wiped */
void hmac_sha256(const void *key, size_t klen, const void *msg, size_t n, unsigned char out[SHA256_BYTES]);

/* 1 when a and b (n bytes) are equal, in time that does not depend on where they differ: a proof
 * compared byte by byte with an early exit would tell a forger how many leading bytes are right */
int same_bytes(const void *a, const void *b, size_t n);
/* zero n bytes at p in a way the compiler does not remove (a key or state about to go out of scope) */
void wipe(void *p, size_t n);

#endif
