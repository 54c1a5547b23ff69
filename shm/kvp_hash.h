/* SPDX-License-Identifier: MIT */
/*
 * kvp_hash.h - the one hash of kvpool: keys, namespaces, the geometry
 * checksum of the segment header.  A 64x64->128 multiply-fold hash,
 * written for kvpool; not cryptographic (a client that can write the
 * segment can forge anything the hash protects: it detects accidents and
 * single stray writes, not an adversary that recomputes it).
 */
#ifndef KVP_HASH_H
#define KVP_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef KVP_INLINE
#define KVP_INLINE static inline
#endif

__extension__ typedef unsigned __int128 kvp_u128;

KVP_INLINE uint64_t
kvp__fold(uint64_t a, uint64_t b)
{
	kvp_u128 r = (kvp_u128)a * b;

	return (uint64_t)r ^ (uint64_t)(r >> 64);
}

KVP_INLINE uint64_t
kvp__rd64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

KVP_INLINE uint64_t
kvp_hash(uint64_t seed, const void *data, size_t n)
{
	static const uint64_t k0 = 0x9e3779b97f4a7c15ull,
			      k1 = 0xc2b2ae3d27d4eb4full,
			      k2 = 0x165667b19e3779f9ull,
			      k3 = 0xd6e8feb86659fd93ull;
	const unsigned char *p = (const unsigned char *)data;
	uint64_t h = seed ^ kvp__fold((uint64_t)n ^ k0, k1);
	uint64_t a, b;

	while (n > 16) {
		h = kvp__fold(kvp__rd64(p) ^ k2, kvp__rd64(p + 8) ^ h ^ k3);
		p += 16;
		n -= 16;
	}
	a = b = 0;
	if (n >= 8) {
		a = kvp__rd64(p);
		b = kvp__rd64(p + n - 8);
	} else if (n >= 4) {
		uint32_t x, y;
		memcpy(&x, p, 4);
		memcpy(&y, p + n - 4, 4);
		a = x;
		b = y;
	} else if (n > 0) {
		a = ((uint64_t)p[0] << 16) | ((uint64_t)p[n >> 1] << 8) |
		    p[n - 1];
	}
	h = kvp__fold(a ^ k1 ^ h, b ^ k2);
	return kvp__fold(h ^ k3, h ^ k0);
}

#endif /* KVP_HASH_H */
