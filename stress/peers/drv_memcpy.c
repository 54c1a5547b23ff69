/* SPDX-License-Identifier: MIT */
/*
 * drv_memcpy.c - the limit: the values in a /dev/shm (tmpfs, MAP_SHARED)
 * region, the same kind of memory as kvpool's arena, copied into the
 * worker's private buffer; puts copy the put source into a tmpfs region
 * of the worker's own.  With as many workers as CPUs it is the all-core
 * limit.  No store to start: the regions are made before the fork.
 */
#include "stress/peers/peers_int.h"

static unsigned char *kvpb_mc[KVPB_NSETS]; /* the sets' copies: shared */
static unsigned char *kvpb_mput;           /* a worker's put region */
static uint64_t kvpb_mput_sz;

static unsigned char *
kvpb_memcpy_of(const struct kvpb_vset *v)
{
	return kvpb_mc[v - kvpb_vs];
}

/* Before the fork: a pre-faulted tmpfs region per value set, inherited
 * by the workers; the fill writes it. */
static int
kvpb_memcpy_setup(void)
{
	unsigned s;

	for (s = 0; s < KVPB_NSETS; s++) {
		const struct kvpb_vset *v = &kvpb_vs[s];

		if (!v->keys)
			continue;
		kvpb_mc[s] = kvpb_shm_region(v->n * v->size);
		if (!kvpb_mc[s]) {
			kvpb_log(
				"bench_peers: out of memory for the value sets\n");
			return -ENOMEM;
		}
	}
	return 0;
}

static uint64_t
kvpb_memcpy_fill_value(const struct kvpb_vset *v, uint64_t i, const void *val)
{
	memcpy(kvpb_memcpy_of(v) + i * v->size, val, v->size);
	return 0;
}

/* The mixed section: the worker's put region, once. */
static int
kvpb_memcpy_prepare(struct kvpb_worker *W, const struct kvpb_cmd *cmd)
{
	const struct kvpb_cfg *c = &kvpb_cfg;

	(void)W;
	if (cmd->sec != SEC_MIXED || kvpb_mput)
		return 0;
	kvpb_mput_sz = c->ws / 2 + c->sizes[c->nsizes - 1] * 16;
	kvpb_mput = kvpb_shm_region(kvpb_mput_sz);
	return kvpb_mput ? 0 : -ENOMEM;
}

static uint64_t
kvpb_memcpy_get(struct kvpb_worker *W, const struct kvpb_vset *v,
		const uint64_t *idx, unsigned m, const unsigned char **first)
{
	const unsigned char *mc = kvpb_memcpy_of(v);
	uint64_t sz = v->size;
	unsigned k;

	(void)first;
	for (k = 0; k < m; k++)
		memcpy(W->dst + k * sz, mc + idx[k] * sz, sz);
	return 0;
}

/* slot: where in the put region the batch starts (it wraps). */
static uint64_t
kvpb_memcpy_put(struct kvpb_worker *W, const unsigned char *keys, unsigned m,
		uint64_t sz, uint64_t slot)
{
	uint64_t nslots = kvpb_mput_sz / sz;
	unsigned k;

	(void)keys;
	for (k = 0; k < m; k++)
		memcpy(kvpb_mput + ((slot + k) % nslots) * sz, W->src, sz);
	kvpb_clobber(kvpb_mput);
	return 0;
}

const struct kvpb_driver kvpb_drv_memcpy = {
	.name = "memcpy",
	.limit = true,
	.rtt = true,
	.setup = kvpb_memcpy_setup,
	.fill_value = kvpb_memcpy_fill_value,
	.prepare = kvpb_memcpy_prepare,
	.get = kvpb_memcpy_get,
	.put = kvpb_memcpy_put,
};
