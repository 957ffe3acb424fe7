/* sha256.c -- SHA-256 and HMAC-SHA256 (sha256.h). */
#include "sha256.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int r) { return x >> r | x << (32 - r); }

static void block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        const uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3,
                       s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10;
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        const uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i],
                       t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
    wipe(w, sizeof w);
}

void sha256_init(Sha256 *s) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, H0, sizeof H0);
    s->bytes = 0;
    s->used = 0;
}

void sha256_update(Sha256 *s, const void *p, size_t n) {
    const unsigned char *q = p;
    s->bytes += n;
    while (n) {
        const size_t take = n < 64 - s->used ? n : 64 - s->used;
        memcpy(s->buf + s->used, q, take);
        s->used += take, q += take, n -= take;
        if (s->used == 64) block(s->h, s->buf), s->used = 0;
    }
}

void sha256_final(Sha256 *s, unsigned char out[SHA256_BYTES]) {
    const uint64_t bits = s->bytes * 8;
    static const unsigned char pad[64] = {0x80};
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha256_update(s, pad, 1 + (119 - s->used) % 64); /* 0x80, zeros, then 8 bytes end the block */
    sha256_update(s, len, 8);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (unsigned char)(s->h[i] >> (24 - 8 * j));
    wipe(s, sizeof *s);
}

void sha256(const void *p, size_t n, unsigned char out[SHA256_BYTES]) {
    Sha256 s;
    sha256_init(&s);
    sha256_update(&s, p, n);
    sha256_final(&s, out);
}

void hmac_sha256_init(HmacSha256 *h, const void *key, size_t klen) {
    unsigned char k[64] = {0}, pad[64];
    if (klen > 64) sha256(key, klen, k); /* RFC 2104: a key longer than a block is hashed first */
    else if (klen) memcpy(k, key, klen);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
    sha256_init(&h->inner);
    sha256_update(&h->inner, pad, 64);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
    sha256_init(&h->outer);
    sha256_update(&h->outer, pad, 64);
    wipe(k, sizeof k);
    wipe(pad, sizeof pad);
}

void hmac_sha256_update(HmacSha256 *h, const void *p, size_t n) { sha256_update(&h->inner, p, n); }

void hmac_sha256_final(HmacSha256 *h, unsigned char out[SHA256_BYTES]) {
    unsigned char in[SHA256_BYTES];
    sha256_final(&h->inner, in);
    sha256_update(&h->outer, in, sizeof in);
    sha256_final(&h->outer, out);
    wipe(in, sizeof in);
}

void hmac_sha256(const void *key, size_t klen, const void *msg, size_t n, unsigned char out[SHA256_BYTES]) {
    HmacSha256 h;
    hmac_sha256_init(&h, key, klen);
    hmac_sha256_update(&h, msg, n);
    hmac_sha256_final(&h, out);
}

int same_bytes(const void *a, const void *b, size_t n) {
    const unsigned char *x = a, *y = b;
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(x[i] ^ y[i]);
    return d == 0;
}

void wipe(void *p, size_t n) {
    volatile unsigned char *v = p; /* volatile stores: not elided as dead */
    while (n--) *v++ = 0;
}
