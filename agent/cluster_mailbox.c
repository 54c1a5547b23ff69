/* SPDX-License-Identifier: MIT */
/*
 * cluster_mailbox.c - the agent's side of the remote mailboxes
 * (struct kvp_rbox, shm/kvp_shm.h): a POSTED box taken, its request
 * copied and validated, looked up and fetched, DONE; at the stop every
 * posted box answered MISS.  Design in agent/cluster_int.h.
 */
#include "agent/cluster_int.h"

/* One client's mailbox, taken (word 'taken'): copy, validate, look up,
 * fetch, answer. */
static void
kvp_cl_call(struct kvp_cl *cl, uint32_t client, uint64_t cw,
	    struct kvp_rbox *rb, uint64_t taken)
{
	struct kvp_seg *s = &cl->a->seg;
	uint64_t cap = ((uint64_t)s->g.g_rbox_kib << 10) - sizeof(*rb);
	unsigned char *data = (unsigned char *)(rb + 1);
	/* relaxed: published by the client's POSTED release (acquired) */
	uint64_t kind = kvp_load_relaxed(&rb->rb_kind),
		 n = kvp_load_relaxed(&rb->rb_n),
		 bytes = kvp_load_relaxed(&rb->rb_bytes), t0 = kvp_cl_now();
	struct kvp_cl_key *k = NULL;
	struct kvp_rbox_ans *ans = NULL;
	char ns[KVP_NS_NAME_MAX + 1];
	uint64_t i, pos, nsid;
	bool bad = true;

	if ((kind == KVP_RB_PROBE || kind == KVP_RB_FETCH) && n >= 1 &&
	    n <= cap / (sizeof(*ans) + 2) && bytes >= 2 &&
	    bytes <= cap - n * sizeof(*ans)) {
		/* a private copy first: the client may keep writing */
		memcpy(cl->req, data + n * sizeof(*ans), bytes);
		k = (struct kvp_cl_key *)calloc(n, sizeof(*k));
		ans = (struct kvp_rbox_ans *)calloc(n, sizeof(*ans));
		pos = 1 + cl->req[0];
		bad = !k || !ans || cl->req[0] == 0 || pos > bytes;
		if (!bad) {
			memcpy(ns, cl->req + 1, cl->req[0]);
			ns[cl->req[0]] = 0;
			bad = strlen(ns) != cl->req[0];
		}
		nsid = bad ? 0 : kvp_ns_id(ns);
		/* the namespace is the client's own, as its slot says (set
		 * at kvp_open): a client asks for its namespace only; the
		 * name is read from the mailbox (the slot keeps a hash and a
		 * truncated copy) and must hash to the slot's id.  acquire:
		 * the slot's fields as published with its LIVE word (cw) */
		if (!bad &&
		    nsid != kvp_load_acquire(&s->clients[client].cs_ns_id))
			bad = true;
		for (i = 0; !bad && i < n; i++) {
			uint32_t kl = pos < bytes ? cl->req[pos] : 0;

			if (!kl || pos + 1 + kl > bytes) {
				bad = true;
				break;
			}
			k[i].key = cl->req + pos + 1;
			k[i].klen = kl;
			k[i].hash = kvp_key_hash(nsid, k[i].key, kl);
			pos += 1 + kl;
		}
		if (!bad && pos != bytes)
			bad = true;
	}
	if (bad) {
		kvp_cl_ctr(cl, KVP_CLC_BAD_MAILBOX, 1);
		n = n <= cap / sizeof(*ans) ? n : cap / sizeof(*ans);
		free(ans);
		ans = (struct kvp_rbox_ans *)calloc(n ? n : 1, sizeof(*ans));
		for (i = 0; ans && i < n; i++)
			kvp_rbox_ans_set(&ans[i], -EINVAL, 0);
	} else {
		kvp_cl_ctr(cl, KVP_CLC_LOOKUPS, 1);
		kvp_cl_ctr(cl, KVP_CLC_LOOKUP_KEYS, n);
		kvp_cl_lookup(cl, nsid, k, (uint32_t)n);
		if (kind == KVP_RB_FETCH) {
			cl->cur_rb = rb;
			cl->cur_taken = taken;
			cl->cur_cw = cw;
			cl->cur_client = client;
			cl->cur_keys = k;
			cl->cur_unwoken = 0;
			kvp_cl_fetch(cl, ns, k, (uint32_t)n);
			cl->cur_rb = NULL;
			for (i = 0; i < n; i++)
				kvp_rbox_ans_set(&ans[i], k[i].st,
						 k[i].st ? 0 : k[i].glen);
		} else {
			for (i = 0; i < n; i++)
				kvp_rbox_ans_set(&ans[i],
						 k[i].owner >= 0 ? 0 : -ENOENT,
						 k[i].dlen);
		}
	}
	/* answer: the client is the one that asked, and the mailbox is
	 * still the request we took (I19's rule, for mailboxes) */
	if (ans &&
	    /* acquire: the slot is still that client */
	    kvp_load_acquire(&s->clients[client].cs_state) == cw &&
	    kvp_rbox_answer_claim(rb, taken)) {
		kvp_rbox_answers_put(rb, ans, n, taken);
		kvp_rbox_answer_done(rb, taken);
		kvp_slot_wake(&s->clients[client]);
	}
	if (!bad && kind == KVP_RB_FETCH)
		kvp_cl_lat(cl, kvp_cl_now() - t0);
	free(k);
	free(ans);
}

/* Every POSTED mailbox of a live client; at the stop, answered MISS. */
void
kvp_cl_mailboxes(struct kvp_cl *cl, bool stopping)
{
	struct kvp_seg *s = &cl->a->seg;
	uint32_t i;

	if (!cl->shm)
		return;
	for (i = 0; i < s->g.g_max_clients; i++) {
		struct kvp_rbox *rb = kvp__rbox(s, i);
		/* acquire: pairs with the client's POSTED release */
		uint64_t w = kvp_load_acquire(&rb->rb_state), cw, taken;

		if (KVP_RB_STATE(w) != KVP_RB_POSTED)
			continue;
		/* acquire: the client slot's word, checked again at the
		 * answer */
		cw = kvp_load_acquire(&s->clients[i].cs_state);
		if (KVP_CS_STATE(cw) != KVP_CS_LIVE)
			continue;
		if (!kvp_rbox_take(rb, w, &taken))
			continue;
		if (!stopping) {
			kvp_cl_call(cl, i, cw, rb, taken);
			continue;
		}
		/* claim to answer; every key a MISS */
		if (kvp_rbox_answer_claim(rb, taken)) {
			/* relaxed: published by DONE */
			uint64_t n = kvp_load_relaxed(&rb->rb_n);
			uint64_t cap = (((uint64_t)s->g.g_rbox_kib << 10) -
					sizeof(*rb)) /
				       sizeof(struct kvp_rbox_ans);

			kvp_rbox_answers_miss(rb, n, cap, taken);
			kvp_rbox_answer_done(rb, taken);
			kvp_slot_wake(&s->clients[i]);
		}
	}
}
