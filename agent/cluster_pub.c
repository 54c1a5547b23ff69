/* SPDX-License-Identifier: MIT */
/*
 * cluster_pub.c - the remote tier's publishing: the index's keys in the
 * directory (a pass every --cluster-publish-ms, changes only, republish
 * by RENAME), and what is due on the clock (kvp_cl_tick: membership and
 * the publish pass, with backoff).  Design in agent/cluster_int.h.
 */
#include "agent/cluster_int.h"

/* ---- publishing ---- */

/*
 * A published value is "<len> <slot>:<gen>": the value's length (all a
 * reader takes: kvp_cl_lookup parses it whole up to the space), then the
 * publication (the index slot and generation it came from).  Unpublishing
 * deletes a field only if it still names that publication (kvp_lua_del):
 * a key deleted and put again, in the same slot or another, within one
 * pass or across two, keeps the field its new publication wrote, in
 * whatever order the two commands reach Redis.  A republish (a new
 * connection, a claim taken, a hash that does not match what we
 * published, an error) builds the whole hash under kvpool:dir:N:new and
 * swaps it in with one RENAME (kvp_lua_swap): readers see the old hash
 * or the new one, never none.
 */

void
kvp_cl_field(uint64_t ns, uint64_t hash, char *f)
{
	memcpy(f, &ns, 8);
	memcpy(f + 8, &hash, 8);
}

/* One pass over the index: what changed since the last pass goes out as
 * scripts of at most 1024 fields each.  0, or -1 (an error reply or the
 * connection lost: everything is published again, after a backoff). */
int
kvp_cl_publish(struct kvp_cl *cl)
{
	struct kvp_seg *s = &cl->a->seg;
	enum {
		CHUNK = 1024,
		HDR = 6, /* EVAL script nkeys claim hash id (+ ttl: set) */
	};
	const char *node = cl->a->cfg.node;
	char dkey[128], nkey[128], ckey[128], ttl[24];
	const char **argv;
	size_t *argl;
	char(*fields)[16], (*vals)[48], (*dfields)[16], (*tags)[32];
	unsigned nset = 0, ndel = 0, k;
	uint64_t i, t0 = kvp_cl_now(), nset_all = 0, ndel_all = 0;
	bool full = cl->republish;
	long long v;
	int rc = -1;

	snprintf(dkey, sizeof(dkey), "kvpool:dir:%s", node);
	snprintf(nkey, sizeof(nkey), "kvpool:dir:%s:new", node);
	snprintf(ckey, sizeof(ckey), "kvpool:claim:%s", node);
	snprintf(ttl, sizeof(ttl), "%u", cl->a->cfg.cluster_ttl_ms);
	argv = (const char **)malloc((HDR + 1 + 2 * CHUNK) * sizeof(*argv));
	argl = (size_t *)malloc((HDR + 1 + 2 * CHUNK) * sizeof(*argl));
	fields = (char(*)[16])malloc(CHUNK * 16);
	dfields = (char(*)[16])malloc(CHUNK * 16);
	vals = (char(*)[48])malloc(CHUNK * 48);
	tags = (char(*)[32])malloc(CHUNK * 32);
	if (!argv || !argl || !fields || !dfields || !vals || !tags)
		goto out;
	if (full) {
		/* a half-built hash of an earlier try */
		redisReply *r =
			(redisReply *)redisCommand(cl->rc, "DEL %s", nkey);

		if (!r) {
			kvp_cl_dir_down(cl, "I/O error");
			goto out;
		}
		if (kvp_cl_rerr(cl, r, "publishing")) {
			freeReplyObject(r);
			goto out;
		}
		freeReplyObject(r);
		memset(cl->pub, 0, cl->nslots * sizeof(*cl->pub));
	}
	argv[3] = ckey;
	argl[3] = strlen(ckey);
	argv[4] = full ? nkey : dkey;
	argl[4] = strlen(argv[4]);
	argv[5] = cl->claim_id;
	argl[5] = strlen(cl->claim_id);
	for (i = 0;; i++) {
		bool flush = i == cl->nslots;

		if (!flush) {
			/* relaxed: a snapshot; the word is read again
			 * below to make sure the entry matched it */
			uint64_t w = kvp_load_relaxed(&s->meta[i]);
			bool ready = KVP_IX_STATE(w) == KVP_IX_READY;
			uint32_t g1 = KVP_IX_GEN(w) + 1;
			struct kvp_pub *p = &cl->pub[i];

			if (ready && p->gen1 == g1)
				continue;
			if (!ready && !p->gen1)
				continue;
			if (p->gen1) {
				kvp_cl_field(p->ns, p->hash, dfields[ndel]);
				snprintf(tags[ndel], sizeof(tags[0]), "%llu:%u",
					 (unsigned long long)i, p->gen1);
				ndel++;
				p->gen1 = 0;
			}
			if (ready) {
				const struct kvp_entry *e = &s->entries[i];
				/* relaxed: checked against the state
				 * word read again (acquire) */
				uint64_t ns = kvp_load_relaxed(&e->e_ns),
					 h = kvp_load_relaxed(&e->e_hash),
					 len = kvp_load_relaxed(&e->e_len);

				/* acquire: the entry's fields are the
				 * ones of generation g1 - 1 */
				if (kvp_load_acquire(&s->meta[i]) == w) {
					p->gen1 = g1;
					p->ns = ns;
					p->hash = h;
					kvp_cl_field(ns, h, fields[nset]);
					snprintf(vals[nset], sizeof(vals[0]),
						 "%llu %llu:%u",
						 (unsigned long long)len,
						 (unsigned long long)i, g1);
					nset++;
				}
			}
		}
		/* the fields' memory is reused: each chunk is sent and
		 * answered before the walk goes on */
		if (nset && (nset == CHUNK || flush || ndel == CHUNK)) {
			argv[6] = ttl;
			argl[6] = strlen(ttl);
			for (k = 0; k < nset; k++) {
				argv[7 + 2 * k] = fields[k];
				argl[7 + 2 * k] = 16;
				argv[8 + 2 * k] = vals[k];
				argl[8 + 2 * k] = strlen(vals[k]);
			}
			v = kvp_cl_script(cl, kvp_lua_set, 2, argv, argl,
					  (int)(7 + 2 * nset), "publishing");
			if (v < 0)
				goto out;
			nset_all += nset;
			nset = 0;
		}
		if (ndel && (ndel == CHUNK || flush)) {
			for (k = 0; k < ndel; k++) {
				argv[6 + 2 * k] = dfields[k];
				argl[6 + 2 * k] = 16;
				argv[7 + 2 * k] = tags[k];
				argl[7 + 2 * k] = strlen(tags[k]);
			}
			v = kvp_cl_script(cl, kvp_lua_del, 2, argv, argl,
					  (int)(6 + 2 * ndel), "unpublishing");
			if (v < 0)
				goto out;
			ndel_all += (uint64_t)v;
			ndel = 0;
		}
		if (flush)
			break;
	}
	if (full) {
		argv[3] = ckey;
		argl[3] = strlen(ckey);
		argv[4] = nkey;
		argl[4] = strlen(nkey);
		argv[5] = dkey;
		argl[5] = strlen(dkey);
		argv[6] = cl->claim_id;
		argl[6] = strlen(cl->claim_id);
		argv[7] = ttl;
		argl[7] = strlen(ttl);
		if (kvp_cl_script(cl, kvp_lua_swap, 3, argv, argl, 8,
				  "publishing") < 0)
			goto out;
		cl->republish = false;
	}
	rc = 0;
	if ((nset_all || ndel_all) && cl->shm) {
		/* a change published now happened after the previous pass
		 * began reading its slot: its age is at most this */
		uint64_t lag = kvp_cl_now() -
			       (cl->prev_pass_ns ? cl->prev_pass_ns : t0);

		kvp_cl_pub_lag(cl, lag);
	}
	cl->prev_pass_ns = t0;
out:
	/* what Redis took, and only that (a republish counts once it is
	 * live) */
	if (!full || !rc)
		kvp_cl_ctr(cl, KVP_CLC_PUBLISHED, nset_all);
	kvp_cl_ctr(cl, KVP_CLC_UNPUBLISHED, ndel_all);
	if (rc)
		/* what Redis holds of ours is not known: all of it again */
		cl->republish = true;
	free(argv);
	free(argl);
	free(fields);
	free(dfields);
	free(vals);
	free(tags);
	return rc;
}

/* What is due on the clock: our membership (every ttl/3) and a publish
 * pass (every --cluster-publish-ms; after a failed one, twice the wait
 * of the one before, up to KVP_CL_BACKOFF_MAX_MS).  Also called while a
 * fetch waits, so a long transfer never lets our node entry expire. */
#define KVP_CL_BACKOFF_MAX_MS 5000u
void
kvp_cl_tick(struct kvp_cl *cl)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	uint64_t now = kvp_cl_now();

	kvp_cl_probes_reap(cl);
	if (!kvp_cl_dir_up(cl)) {
		kvp_cl_set_state(cl, KVP_CL_DOWN);
		return;
	}
	if (now >= cl->next_member_ns) {
		kvp_cl_membership(cl);
		cl->next_member_ns = now + cfg->cluster_ttl_ms * 1000000ull / 3;
	}
	if (cl->rc && cl->claimed && now >= cl->next_pub_ns) {
		uint64_t wait = cfg->cluster_publish_ms;

		if (kvp_cl_publish(cl)) {
			unsigned f = cl->pub_fails < 16 ? cl->pub_fails : 16;

			wait <<= f;
			if (wait > KVP_CL_BACKOFF_MAX_MS)
				wait = KVP_CL_BACKOFF_MAX_MS >
						       cfg->cluster_publish_ms ?
					       KVP_CL_BACKOFF_MAX_MS :
					       cfg->cluster_publish_ms;
			cl->pub_fails++;
		} else {
			cl->pub_fails = 0;
		}
		cl->next_pub_ns = now + wait * 1000000ull;
	}
}
