/* SPDX-License-Identifier: MIT */
/*
 * ssd_hcache.c - the header cache: batch header blocks (format 3) of live
 * segments, kept in the agent's memory so that a read of a value is one
 * device operation, the value's extent, instead of two (issue 29: "one
 * read per value").
 *
 * A read checks the value against its batch header (the entry's identity
 * and the chunk CRCs, design 6 in tiers/ssd_int.h).  Values demoted
 * together lie in one batch, and are mostly read back together, so a few
 * thousand header blocks cover what a node reads back soon.  A block
 * enters the cache when its batch write completes (the header the store
 * built and wrote) and when a read from disk checked it; it is checked
 * again (its CRC, where it was written) each time a read uses it, as a
 * block read from disk is.  A header block never changes on disk while
 * its segment lives (the log only appends; a torn tail is cut at
 * recovery, before any read) and segment numbers are not reused while
 * the store is open, so an entry is valid until its segment is dropped,
 * when its entries go (kvp_hc_drop_seg).
 *
 * Set-associative (4 ways), replacement of the least recently used way of
 * a set.  The tier thread's alone: filled and read only by calls made on
 * it (kvp_ssd_read_agent, kvp_ssd_poll_agent, segment drop), so it takes
 * no lock.
 */
#include "tiers/ssd_int.h"

#define KVP_HC_WAYS 4u

struct kvp_hc_way {
	uint32_t id;   /* segment; 0: empty (segment numbers start at 1) */
	uint32_t blk;  /* the header's block in it */
	uint64_t used; /* the cache's clock at the last use */
};

struct kvp_hcache {
	uint32_t nsets;
	uint64_t clock;
	struct kvp_hc_way *ways;
	unsigned char *blocks; /* nsets * KVP_HC_WAYS blocks, aligned */
};

/* A cache of about 'bytes' of header blocks; NULL for 0 (no cache) or
 * when memory is short (reads then read their header from disk). */
struct kvp_hcache *
kvp_hc_new(uint64_t bytes)
{
	struct kvp_hcache *c;
	uint64_t sets = bytes / B / KVP_HC_WAYS;

	if (!sets)
		return NULL;
	if (sets > (1u << 24))
		sets = 1u << 24;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->nsets = (uint32_t)sets;
	c->ways = calloc(sets * KVP_HC_WAYS, sizeof(*c->ways));
	/* not zeroed: a way's block is read only after it was filled */
	if (!c->ways ||
	    posix_memalign((void **)&c->blocks, B, sets * KVP_HC_WAYS * B)) {
		free(c->ways);
		free(c);
		return NULL;
	}
	return c;
}

void
kvp_hc_free(struct kvp_hcache *c)
{
	if (!c)
		return;
	free(c->ways);
	free(c->blocks);
	free(c);
}

static uint32_t
kvp_hc_set(const struct kvp_hcache *c, uint32_t id, uint32_t blk)
{
	uint64_t h = ((uint64_t)id << 32 | blk) * 0x9e3779b97f4a7c15ull;

	return (uint32_t)((h >> 32) % c->nsets);
}

/* Copy the header block at (id, blk) into out (B bytes) if cached. */
bool
kvp_hc_get(struct kvp_hcache *c, uint32_t id, uint32_t blk, void *out)
{
	uint32_t set, w;

	if (!c || !id)
		return false;
	set = kvp_hc_set(c, id, blk);
	for (w = 0; w < KVP_HC_WAYS; w++) {
		struct kvp_hc_way *x = &c->ways[set * KVP_HC_WAYS + w];

		if (x->id == id && x->blk == blk) {
			x->used = ++c->clock;
			memcpy(out,
			       c->blocks +
				       ((uint64_t)set * KVP_HC_WAYS + w) * B,
			       B);
			return true;
		}
	}
	return false;
}

/* Keep the header block hdr (B bytes) of (id, blk): in a free way of its
 * set, or in place of the least recently used one. */
void
kvp_hc_put(struct kvp_hcache *c, uint32_t id, uint32_t blk, const void *hdr)
{
	struct kvp_hc_way *victim = NULL;
	uint32_t set, w, at = 0;

	if (!c || !id)
		return;
	set = kvp_hc_set(c, id, blk);
	for (w = 0; w < KVP_HC_WAYS; w++) {
		struct kvp_hc_way *x = &c->ways[set * KVP_HC_WAYS + w];

		if (x->id == id && x->blk == blk)
			return; /* the same bytes: the block never changes */
		if (!victim || !x->id ||
		    (victim->id && x->used < victim->used)) {
			victim = x;
			at = w;
		}
	}
	victim->id = id;
	victim->blk = blk;
	victim->used = ++c->clock;
	memcpy(c->blocks + ((uint64_t)set * KVP_HC_WAYS + at) * B, hdr, B);
}

/* Segment id is dropped: its blocks go. */
void
kvp_hc_drop_seg(struct kvp_hcache *c, uint32_t id)
{
	uint64_t k;

	if (!c)
		return;
	for (k = 0; k < (uint64_t)c->nsets * KVP_HC_WAYS; k++)
		if (c->ways[k].id == id)
			c->ways[k].id = 0;
}
