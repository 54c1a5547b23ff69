/* SPDX-License-Identifier: MIT */
/*
 * ssd_format.c - the SSD store's on-disk codec: format 3 batch header
 * blocks (entries, chunk CRCs, the block's seal and check), summary
 * entries, and the checks of format 1 and 2 record headers.  Functions
 * of bytes only: no file, no request (layouts in tiers/kvp_ssd.h,
 * the store's design in tiers/ssd_int.h).
 */
#include "tiers/ssd_int.h"

unsigned
kvp_chunk_shift(uint64_t vlen, uint32_t *nchunks)
{
	unsigned sh = KVP_SSD_CHUNK_SHIFT_MIN;

	while (((vlen + (1ull << sh) - 1) >> sh) > KVP_SSD_MAX_CHUNKS)
		sh++;
	*nchunks = (uint32_t)((vlen + (1ull << sh) - 1) >> sh);
	return sh;
}

size_t
kvp_sum_ent_size(unsigned klen)
{
	return (sizeof(struct kvp_ssd_sum_ent) + klen + 7) & ~(size_t)7;
}

/* ---- format 3: batch header blocks ---- */

/* Bytes of a batch entry with a key of klen bytes and nchunks CRCs. */
size_t
kvp_bent_size(unsigned klen, uint32_t nchunks)
{
	return (sizeof(struct kvp_ssd_bent) + ((klen + 3u) & ~3u) +
		4u * (size_t)nchunks + 7) &
	       ~(size_t)7;
}

/* The chunk CRCs of the value src[0..nsrc) (vlen bytes, chunks of 1 << sh
 * bytes) into crc[]. */
void
kvp_chunk_crcs(uint32_t *crc, uint32_t nchunks, unsigned sh, uint64_t vlen,
	       const struct iovec *src, unsigned nsrc)
{
	uint64_t cs = 1ull << sh, done = 0;
	unsigned c, i = 0;
	size_t in = 0;

	for (c = 0; c < nchunks; c++) {
		uint64_t end = (c + 1) * cs < vlen ? (c + 1) * cs : vlen;
		uint32_t v = 0;

		while (done < end && i < nsrc) {
			size_t take = src[i].iov_len - in;
			if (take > end - done)
				take = (size_t)(end - done);
			v = kvp_crc32c(v, (const char *)src[i].iov_base + in,
				       take);
			in += take;
			done += take;
			if (in == src[i].iov_len) {
				i++;
				in = 0;
			}
		}
		crc[c] = v;
	}
}

/* Write an entry at 'at' (zeroed, kvp_bent_size bytes): a value (src,
 * vlen bytes, delta blocks after its header) or a tombstone (target). */
void
kvp_bent_fill(unsigned char *at, uint8_t type, unsigned delta, uint64_t ns,
	      uint64_t seq, const void *key, unsigned klen, uint64_t vlen,
	      uint64_t target, const struct iovec *src, unsigned nsrc)
{
	struct kvp_ssd_bent *e = (struct kvp_ssd_bent *)at;
	uint32_t nchunks = 0;
	unsigned sh = type == KVP_SSD_REC_VALUE ?
			      kvp_chunk_shift(vlen, &nchunks) :
			      KVP_SSD_CHUNK_SHIFT_MIN;

	e->be_type = type;
	e->be_klen = (uint8_t)klen;
	e->be_delta = type == KVP_SSD_REC_VALUE ? (uint8_t)delta : 0;
	e->be_chunk_shift = (uint8_t)sh;
	e->be_nchunks = nchunks;
	e->be_ns = ns;
	e->be_seq = seq;
	e->be_vlen = type == KVP_SSD_REC_VALUE ? vlen : target;
	memcpy(e + 1, key, klen);
	kvp_chunk_crcs((uint32_t *)(at + sizeof(*e) + ((klen + 3u) & ~3u)),
		       nchunks, sh, vlen, src, nsrc);
}

/* Seal a batch header block: its fields and its CRC. */
void
kvp_bhdr_finish(void *hdr, uint32_t seg, uint64_t blk, uint64_t nblocks,
		unsigned nrec, uint32_t used)
{
	struct kvp_ssd_batch_hdr *h = hdr;

	h->bh_magic = KVP_SSD_MAGIC_BATCH;
	h->bh_version = KVP_SSD_FORMAT;
	h->bh_nrec = (uint16_t)nrec;
	h->bh_len = used;
	h->bh_seg_id = seg;
	h->bh_block = (uint32_t)blk;
	h->bh_nblocks = (uint32_t)nblocks;
	h->bh_pad = 0;
	h->bh_crc = 0;
	h->bh_crc = kvp_crc32c(0, h, used);
}

/*
 * Is the block at hdr a batch header written at block blk of segment
 * (id, nblocks blocks in all)?  Magic, version, bounds and CRC (the
 * block's bytes are left as they were).
 */
bool
kvp_bhdr_valid(const void *hdr, uint32_t id, uint64_t blk, uint64_t seg_blocks)
{
	struct kvp_ssd_batch_hdr h;
	uint32_t crc;

	memcpy(&h, hdr, sizeof(h));
	if (h.bh_magic != KVP_SSD_MAGIC_BATCH || h.bh_version < 3 ||
	    h.bh_version > KVP_SSD_FORMAT || h.bh_len < sizeof(h) ||
	    h.bh_len > B || h.bh_seg_id != id || h.bh_block != blk ||
	    h.bh_nblocks == 0 || blk + h.bh_nblocks > seg_blocks)
		return false;
	crc = h.bh_crc;
	h.bh_crc = 0;
	return kvp_crc32c(kvp_crc32c(0, &h, sizeof(h)),
			  (const char *)hdr + sizeof(h),
			  h.bh_len - sizeof(h)) == crc;
}

/*
 * The next entry of a valid batch header at byte *pos (start at
 * sizeof(struct kvp_ssd_batch_hdr)): a copy in *e, its key and CRCs.
 * False at the end, or at an entry that does not hold together (bounds,
 * type, chunk geometry): the CRC matched, so only a bug writes one.
 */
bool
kvp_bent_next(const void *hdr, uint32_t *pos, struct kvp_ssd_bent *e,
	      const unsigned char **key, const uint32_t **crc)
{
	const struct kvp_ssd_batch_hdr *h = hdr;
	const unsigned char *b = hdr;
	uint64_t cs;
	size_t n;

	if (*pos + sizeof(*e) > h->bh_len)
		return false;
	memcpy(e, b + *pos, sizeof(*e));
	if (e->be_klen == 0 || (e->be_type != KVP_SSD_REC_VALUE &&
				e->be_type != KVP_SSD_REC_TOMBSTONE))
		return false;
	if (e->be_type == KVP_SSD_REC_VALUE) {
		if (e->be_delta == 0 || e->be_vlen == 0 ||
		    e->be_chunk_shift < KVP_SSD_CHUNK_SHIFT_MIN ||
		    e->be_chunk_shift > 40 ||
		    e->be_delta + kvp_rup(e->be_vlen) / B > h->bh_nblocks)
			return false;
		cs = 1ull << e->be_chunk_shift;
		if ((e->be_vlen + cs - 1) / cs != e->be_nchunks)
			return false;
	} else if (e->be_nchunks) {
		return false;
	}
	n = kvp_bent_size(e->be_klen, e->be_nchunks);
	if (*pos + n > h->bh_len)
		return false;
	*key = b + *pos + sizeof(*e);
	*crc = (const uint32_t *)(b + *pos + sizeof(*e) +
				  ((e->be_klen + 3u) & ~3u));
	*pos += (uint32_t)n;
	return true;
}

/* The value entry at distance delta of a valid batch header, or false. */
bool
kvp_bent_find(const void *hdr, unsigned delta, struct kvp_ssd_bent *e,
	      const unsigned char **key, const uint32_t **crc)
{
	uint32_t pos = sizeof(struct kvp_ssd_batch_hdr);
	unsigned k, n = ((const struct kvp_ssd_batch_hdr *)hdr)->bh_nrec;

	for (k = 0; k < n && kvp_bent_next(hdr, &pos, e, key, crc); k++)
		if (e->be_type == KVP_SSD_REC_VALUE && e->be_delta == delta)
			return true;
	return false;
}

/* A record as a summary entry describes it (key at key). */
void
kvp_rec_from_sum(const struct kvp_sseg *g, const struct kvp_ssd_sum_ent *e,
		 const void *key, struct kvp_ssd_rec *rec)
{
	rec->loc = KVP_SSD_LOC(g->id, e->se_block);
	rec->seq = e->se_seq;
	rec->ns = e->se_ns;
	rec->vlen = e->se_type == KVP_SSD_REC_VALUE ? e->se_vlen : 0;
	rec->target = e->se_type == KVP_SSD_REC_TOMBSTONE ? e->se_vlen : 0;
	rec->hash = 0;
	rec->key = key;
	rec->klen = e->se_klen;
	rec->type = e->se_type;
}

/* Validate a record header read from block blk of segment g. */
bool
kvp_hdr_valid(const struct kvp_sseg *g, const struct kvp_ssd_rec_hdr *h,
	      uint64_t blk)
{
	struct kvp_ssd_rec_hdr tmp;
	uint32_t crc;

	if (h->rh_magic != KVP_SSD_MAGIC_REC ||
	    h->rh_version < KVP_SSD_FORMAT_MIN || h->rh_version > 2 ||
	    h->rh_len < sizeof(*h) || h->rh_len > B || h->rh_seg_id != g->id ||
	    h->rh_block != blk || h->rh_klen == 0 ||
	    (h->rh_type != KVP_SSD_REC_VALUE &&
	     h->rh_type != KVP_SSD_REC_TOMBSTONE) ||
	    (h->rh_type == KVP_SSD_REC_VALUE &&
	     (h->rh_vlen == 0 || h->rh_vlen > g->size ||
	      blk + 1 + kvp_rup(h->rh_vlen) / B > g->size / B)))
		return false;
	memcpy(&tmp, h, sizeof(tmp));
	crc = tmp.rh_crc;
	((struct kvp_ssd_rec_hdr *)(uintptr_t)h)->rh_crc = 0;
	tmp.rh_crc = kvp_crc32c(0, h, h->rh_len);
	((struct kvp_ssd_rec_hdr *)(uintptr_t)h)->rh_crc = crc;
	return tmp.rh_crc == crc;
}

/* Do the value bytes at val match every chunk CRC of header h? */
bool
kvp_value_crcs_ok(const struct kvp_ssd_rec_hdr *h, const unsigned char *val)
{
	size_t koff = (sizeof(*h) + h->rh_klen + 3) & ~(size_t)3;
	const uint32_t *crc = (const uint32_t *)((const char *)h + koff);
	uint64_t cs, nch, c;

	if (h->rh_chunk_shift < KVP_SSD_CHUNK_SHIFT_MIN ||
	    h->rh_chunk_shift > 40)
		return false;
	cs = 1ull << h->rh_chunk_shift;
	nch = (h->rh_vlen + cs - 1) / cs;
	if (nch != h->rh_nchunks || koff + 4 * nch > h->rh_len)
		return false;
	for (c = 0; c < nch; c++) {
		uint64_t a = c * cs,
			 e = a + cs < h->rh_vlen ? a + cs : h->rh_vlen;

		if (kvp_crc32c(0, val + a, (size_t)(e - a)) != crc[c])
			return false;
	}
	return true;
}
