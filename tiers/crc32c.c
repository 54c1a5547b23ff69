/* SPDX-License-Identifier: MIT */
/*
 * crc32c.c - CRC-32C (Castagnoli; reflected polynomial 0x82F63B78), the
 * checksum of every SSD record header, value chunk, summary and trailer.
 *
 * Two implementations with one result:
 *  - hardware: the SSE4.2 crc32 instruction, 8 bytes per instruction;
 *    compiled with a per-function target attribute so the rest of the
 *    build needs no -msse4.2, and used only when __builtin_cpu_supports
 *    says the CPU has it;
 *  - software: slicing-by-8 tables (8 KiB, built once), for other CPUs.
 * Both take and return the finished CRC (pre- and post-inverted inside),
 * so calls chain: crc(crc(0, a), b) == crc(0, a || b).  Known vector:
 * crc32c("123456789") == 0xE3069283 (tests/tiers/test_ssd.c checks both).
 */
#include <pthread.h>
#include <string.h>

#include "tiers/kvp_ssd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define KVP_CRC_HAVE_X86 1
#else
#define KVP_CRC_HAVE_X86 0
#endif

#define KVP_CRC_POLY 0x82F63B78u

static uint32_t kvp_crc_tab[8][256];
static bool kvp_crc_hw;
static pthread_once_t kvp_crc_once = PTHREAD_ONCE_INIT;

static void
kvp_crc_init(void)
{
	unsigned i, k;

	for (i = 0; i < 256; i++) {
		uint32_t c = i;

		for (k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ KVP_CRC_POLY : c >> 1;
		kvp_crc_tab[0][i] = c;
	}
	for (i = 0; i < 256; i++)
		for (k = 1; k < 8; k++)
			kvp_crc_tab[k][i] =
				(kvp_crc_tab[k - 1][i] >> 8) ^
				kvp_crc_tab[0][kvp_crc_tab[k - 1][i] & 0xff];
#if KVP_CRC_HAVE_X86
	__builtin_cpu_init();
	kvp_crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t
kvp_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	pthread_once(&kvp_crc_once, kvp_crc_init);
	crc = ~crc;
	while (len && ((uintptr_t)p & 7)) {
		crc = kvp_crc_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
		len--;
	}
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, 8); /* little-endian load */
		v ^= crc;
		crc = kvp_crc_tab[7][v & 0xff] ^
		      kvp_crc_tab[6][(v >> 8) & 0xff] ^
		      kvp_crc_tab[5][(v >> 16) & 0xff] ^
		      kvp_crc_tab[4][(v >> 24) & 0xff] ^
		      kvp_crc_tab[3][(v >> 32) & 0xff] ^
		      kvp_crc_tab[2][(v >> 40) & 0xff] ^
		      kvp_crc_tab[1][(v >> 48) & 0xff] ^
		      kvp_crc_tab[0][v >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = kvp_crc_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

#if KVP_CRC_HAVE_X86 && defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
kvp_crc_hw_run(uint32_t crc, const unsigned char *p, size_t len)
{
	uint64_t c = ~crc;

	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	while (len >= 32) {
		uint64_t v[4];

		memcpy(v, p, sizeof(v));
		c = _mm_crc32_u64(c, v[0]);
		c = _mm_crc32_u64(c, v[1]);
		c = _mm_crc32_u64(c, v[2]);
		c = _mm_crc32_u64(c, v[3]);
		p += 32;
		len -= 32;
	}
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c = _mm_crc32_u64(c, v);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}
#endif

bool
kvp_crc32c_hw_available(void)
{
	pthread_once(&kvp_crc_once, kvp_crc_init);
#if KVP_CRC_HAVE_X86 && defined(__x86_64__)
	return kvp_crc_hw;
#else
	return false;
#endif
}

uint32_t
kvp_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
#if KVP_CRC_HAVE_X86 && defined(__x86_64__)
	if (kvp_crc32c_hw_available())
		return kvp_crc_hw_run(crc, buf, len);
#endif
	return kvp_crc32c_sw(crc, buf, len);
}

uint32_t
kvp_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return kvp_crc32c_hw(crc, buf, len);
}
