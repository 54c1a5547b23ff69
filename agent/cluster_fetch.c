/* SPDX-License-Identifier: MIT */
/*
 * cluster_fetch.c - the requester's side of the remote tier: owners
 * looked up in the directory, waves of LEASEs, DATA checked and landed
 * in this pool (kvp_put), each key answered in the client's mailbox as
 * it lands (I37).  Design in agent/cluster_int.h.
 */
#include "agent/cluster_int.h"

/* A LEASE's token: unguessable to whoever did not see the LEASE, so a
 * DATA message cannot be forged by another member (xorshift128+ seeded
 * from getrandom at start; never 0). */
static uint64_t
kvp_cl_token(struct kvp_cl *cl)
{
	uint64_t x = cl->rng[0], y = cl->rng[1];

	cl->rng[0] = y;
	x ^= x << 23;
	cl->rng[1] = x ^ y ^ (x >> 17) ^ (y >> 26);
	return (cl->rng[1] + y) | 1;
}

/* ---- the requester's side ---- */

/*
 * Which live peer holds each key: one pipelined HMGET per live peer (one
 * round trip).  k[i].owner = peer index or -1, k[i].dlen its length.  Among
 * several holders a key goes to the one with the highest rendezvous score
 * (spreads a hot batch over its holders).  -1: no directory.
 */
int
kvp_cl_lookup(struct kvp_cl *cl, uint64_t nsid, struct kvp_cl_key *key,
	      uint32_t n)
{
	const char **argv = NULL;
	size_t *argl = NULL;
	char *fields = NULL, dkey[KVP_CL_MAX_PEERS][96];
	redisReply *rep[KVP_CL_MAX_PEERS];
	unsigned np = 0, pi[KVP_CL_MAX_PEERS], j;
	uint64_t t0;
	uint32_t k;
	int rc = -1;

	for (k = 0; k < n; k++) {
		key[k].owner = -1;
		key[k].dlen = 0;
	}
	if (!kvp_cl_dir_up(cl))
		return -1;
	for (j = 0; j < cl->npeers; j++)
		if (cl->peers[j].live && cl->peers[j].ep &&
		    !cl->peers[j].failed)
			pi[np++] = j;
	if (!np)
		return 0;
	argv = (const char **)malloc((2 + (size_t)n) * sizeof(*argv));
	argl = (size_t *)malloc((2 + (size_t)n) * sizeof(*argl));
	fields = (char *)malloc((size_t)n * 16);
	if (!argv || !argl || !fields)
		goto out;
	for (k = 0; k < n; k++) {
		kvp_cl_field(nsid, key[k].hash, fields + 16 * (size_t)k);
		argv[2 + k] = fields + 16 * (size_t)k;
		argl[2 + k] = 16;
	}
	argv[0] = "HMGET";
	argl[0] = 5;
	for (j = 0; j < np; j++) {
		snprintf(dkey[j], sizeof(dkey[0]), "kvpool:dir:%s",
			 cl->peers[pi[j]].name);
		argv[1] = dkey[j];
		argl[1] = strlen(dkey[j]);
		redisAppendCommandArgv(cl->rc, (int)(2 + n), argv, argl);
	}
	t0 = kvp_cl_now();
	if (!kvp_cl_replies(cl, rep, np))
		goto out;
	kvp_cl_ctr(cl, KVP_CLC_DIR_RTT, 1);
	kvp_cl_dir_rtt(cl, kvp_cl_now() - t0);
	for (j = 0; j < np; j++)
		if (rep[j] && rep[j]->type == REDIS_REPLY_ERROR)
			kvp_cl_rerr(cl, rep[j], "looking up keys");
	for (k = 0; k < n; k++) {
		uint64_t top = 0, dlen;

		for (j = 0; j < np; j++) {
			const redisReply *r = rep[j], *e;
			uint64_t score;

			if (!r || r->type != REDIS_REPLY_ARRAY ||
			    r->elements != n)
				continue;
			e = r->element[k];
			if (e->type != REDIS_REPLY_STRING ||
			    !kvp_cl_dirval_len(e->str, e->len, &dlen))
				continue;
			/* rendezvous over the holders, by name: every
			 * node picks the same holder for a key */
			score = kvp_hash(key[k].hash, cl->peers[pi[j]].name,
					 strlen(cl->peers[pi[j]].name)) |
				1;
			if (score > top) {
				top = score;
				key[k].owner = (int)pi[j];
				key[k].dlen = dlen;
			}
		}
		kvp_cl_ctr(cl, KVP_CLC_FOUND, key[k].owner >= 0);
	}
	for (j = 0; j < np; j++)
		if (rep[j])
			freeReplyObject(rep[j]);
	rc = 0;
out:
	free(argv);
	free(argl);
	free(fields);
	return rc;
}

/* One key's final answer, at once, into the mailbox of the FETCH being
 * served (I37: only while the mailbox is still the request we took and
 * its client the one that asked; a late write is ignored by the client,
 * whose ready words carry the request's sequence).  The client is woken
 * every 8 answers, and for each of 256 KiB or more. */
static void
kvp_cl_answer_one(struct kvp_cl *cl, const struct kvp_cl_key *x)
{
	struct kvp_seg *s = &cl->a->seg;
	struct kvp_rbox_ans *a;

	if (!cl->cur_rb ||
	    /* acquire: the request is still the one we took */
	    kvp_load_acquire(&cl->cur_rb->rb_state) != cl->cur_taken ||
	    /* acquire: and its client the one that asked */
	    kvp_load_acquire(&s->clients[cl->cur_client].cs_state) !=
		    cl->cur_cw)
		return;
	a = (struct kvp_rbox_ans *)(cl->cur_rb + 1) + (x - cl->cur_keys);
	kvp_rbox_answer_one(a, x->st, x->st ? 0 : x->glen, cl->cur_taken);
	if (++cl->cur_unwoken >= 8 || x->glen >= (256u << 10)) {
		cl->cur_unwoken = 0;
		kvp_slot_wake(&s->clients[cl->cur_client]);
	}
}

/* A key's bytes arrived: into this pool once their CRC is the owner's
 * (the owner took it under its lease), and answered. */
static void
kvp_cl_land(struct kvp_cl *cl, struct kvp_client *c, struct kvp_cl_key *x)
{
	int rc;

	x->phase = KVP_CK_DONE;
	if (kvp_crc32c(0, cl->rx + x->off, x->glen) != x->crc) {
		x->st = -EIO;
		kvp_cl_ctr(cl, KVP_CLC_CORRUPT, 1);
		kvp_cl_answer_one(cl, x);
		return;
	}
	rc = kvp_put(c, x->key, x->klen, cl->rx + x->off, x->glen);
	x->st = rc == 0 || rc == -EEXIST      ? 0 :
		rc == -EBUSY || rc == -ENOSPC ? rc :
		rc == -E2BIG                  ? -E2BIG :
						-EIO;
	if (!x->st) {
		kvp_cl_ctr(cl, KVP_CLC_FETCHED, 1);
		kvp_cl_ctr(cl, KVP_CLC_FETCH_BYTES, x->glen);
	}
	kvp_cl_answer_one(cl, x);
}

/*
 * A DATA message (in the AM handler): it answers key h->idx of a LEASE of
 * the wave in flight only if it names that LEASE's token, comes from the
 * owner we asked under the incarnation we asked, carries our secret, and
 * answers a key not answered yet; its bytes go only into the room we
 * reserved for that key (the directory's length).  Anything else is
 * refused (a rendezvous refused is dropped unread).
 */
void
kvp_cl_data(struct kvp_cl *cl, const struct kvp_wire_data *h, void *data,
	    size_t len, bool rndv)
{
	struct kvp_cl_lreq *r = NULL;
	struct kvp_cl_key *x;
	ucp_request_param_t prm;
	char from[sizeof(h->from)];
	uint32_t i;
	void *rq;

	memcpy(from, h->from, sizeof(from));
	from[sizeof(from) - 1] = 0;
	if (h->magic != KVP_WIRE_MAGIC || memcmp(h->secret, cl->secret, 16))
		goto refuse;
	for (i = 0; i < cl->nlreqs; i++)
		if (cl->lreqs[i].req == h->req && cl->lreqs[i].out &&
		    !cl->lreqs[i].done) {
			r = &cl->lreqs[i];
			break;
		}
	if (!r || h->idx >= r->cnt || h->inc != r->inc ||
	    strcmp(from, cl->peers[r->peer].name))
		goto refuse;
	x = &cl->wk[cl->ww[cl->wpos[r->first + h->idx]]];
	if (x->phase != KVP_CK_WAIT)
		goto refuse; /* answered already */
	r->answered++;
	cl->wave_moved++;
	if (h->status) {
		x->st = h->status == -ENOENT ? -ENOENT :
			h->status == -EBUSY  ? -EBUSY :
			h->status == -E2BIG  ? -E2BIG :
					       -EIO;
		if (h->status == -ENOENT)
			kvp_cl_ctr(cl, KVP_CLC_STALE, 1);
		x->phase = KVP_CK_DONE;
		return;
	}
	if (h->len == 0 || h->len > x->dlen || h->len != len) {
		/* another length than the directory's: replaced since */
		x->st = h->len > x->dlen ? -ENOENT : -EIO;
		x->phase = KVP_CK_DONE;
		return;
	}
	x->glen = h->len;
	x->crc = h->crc;
	if (!rndv) {
		memcpy(cl->rx + x->off, data, len);
		x->phase = KVP_CK_ARRIVED;
		return;
	}
	memset(&prm, 0, sizeof(prm));
	rq = kvp_ucx.am_recv_data_nbx(cl->worker, data, cl->rx + x->off, len,
				      &prm);
	if (UCS_PTR_IS_ERR(rq)) {
		x->st = -EIO;
		x->phase = KVP_CK_DONE;
	} else if (!rq) {
		x->phase = KVP_CK_ARRIVED;
	} else {
		x->rq = rq;
		x->phase = KVP_CK_RECV;
	}
	return;
refuse:
	kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
}

/* Send LEASE request r (its keys: the wave positions pos[r->first..]),
 * to the incarnation of its owner the directory names now. */
static void
kvp_cl_lease_send(struct kvp_cl *cl, const char *ns, struct kvp_cl_key *k,
		  const uint32_t *w, const uint32_t *pos, struct kvp_cl_lreq *r)
{
	struct kvp_peer *p = &cl->peers[r->peer];
	size_t nsl = strlen(ns), bytes = 1 + nsl, at;
	struct kvp_wire_hdr *h;
	ucp_request_param_t prm;
	uint32_t i;
	void *rq;

	for (i = 0; i < r->cnt; i++)
		bytes += 1 + k[w[pos[r->first + i]]].klen;
	r->msg = (unsigned char *)calloc(1, sizeof(*h) + bytes);
	r->req = kvp_cl_token(cl);
	r->inc = p->inc;
	r->done = true; /* unless sent below: its keys stay FAILED */
	if (!r->msg || !p->ep || p->failed)
		return;
	h = (struct kvp_wire_hdr *)r->msg;
	h->magic = KVP_WIRE_MAGIC;
	h->req = r->req;
	memcpy(h->secret, p->secret, 16);
	snprintf(h->from, sizeof(h->from), "%s", cl->a->cfg.node);
	h->n = r->cnt;
	h->bytes = (uint32_t)bytes;
	h->inc = (uint32_t)p->inc;
	at = sizeof(*h);
	r->msg[at++] = (unsigned char)nsl;
	memcpy(r->msg + at, ns, nsl);
	at += nsl;
	for (i = 0; i < r->cnt; i++) {
		const struct kvp_cl_key *x = &k[w[pos[r->first + i]]];

		r->msg[at++] = (unsigned char)x->klen;
		memcpy(r->msg + at, x->key, x->klen);
		at += x->klen;
	}
	memset(&prm, 0, sizeof(prm));
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
	prm.flags = UCP_AM_SEND_FLAG_EAGER;
	rq = kvp_ucx.am_send_nbx(p->ep, KVP_AM_LEASE, NULL, 0, r->msg, at,
				 &prm);
	if (UCS_PTR_IS_ERR(rq))
		return;
	r->sent = rq;
	r->out = true;
	r->done = false;
}

/* The wave gives up on the keys still moving: receives in flight end by
 * closing their owners' endpoints (forced: UCX writes nothing more into
 * the receive buffer), which are reconnected when the directory names
 * them again. */
static void
kvp_cl_wave_abort(struct kvp_cl *cl, struct kvp_cl_key *k, const uint32_t *w,
		  uint32_t m)
{
	uint32_t i;

	/* no DATA is taken from here on (closing an endpoint progresses
	 * UCX, which may deliver one) */
	for (i = 0; i < cl->nlreqs; i++)
		cl->lreqs[i].done = true;
	for (i = 0; i < m; i++) {
		struct kvp_cl_key *x = &k[w[i]];

		if (!x->rq)
			continue;
		kvp_ucx.request_cancel(cl->worker, x->rq);
		cl->peers[x->owner].failed = true;
	}
	for (i = 0; i < m; i++) {
		struct kvp_cl_key *x = &k[w[i]];

		if (x->rq && cl->peers[x->owner].ep)
			kvp_cl_peer_close(cl, &cl->peers[x->owner]);
		if (x->rq) {
			kvp_ucx.request_free(x->rq);
			x->rq = NULL;
		}
		if (x->phase != KVP_CK_DONE)
			x->phase = KVP_CK_DONE; /* st: -EIO */
	}
}

/*
 * One wave: LEASE the keys from their owners in chunks of
 * KVP_LEASE_CHUNK (at most two chunks outstanding per owner, so an answer
 * never waits behind a long queue), take each key's DATA as it comes
 * (the owner sends the bytes; a large value by rendezvous straight into
 * the receive buffer), put each key into this pool as it lands (answering
 * it in the client's mailbox).  Every wait is bounded by
 * --remote-timeout-ms without progress (a DATA, a receive completed) and
 * by the stop; a LEASE whose owner restarted meanwhile (another
 * incarnation) or failed ends at once, its keys FAILED.  Answers in
 * k[].st.
 */
static void
kvp_cl_wave(struct kvp_cl *cl, struct kvp_client *c, const char *ns,
	    struct kvp_cl_key *k, const uint32_t *w, uint32_t m)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	uint64_t tmo = cfg->remote_timeout_ms * 1000000ull, deadline, moved;
	uint32_t *pos = NULL, i, np = 0, nr = 0, r;
	struct kvp_cl_lreq *rq = NULL;
	unsigned j, outq[KVP_CL_MAX_PEERS] = { 0 };
	bool used[KVP_CL_MAX_PEERS] = { false };

	pos = (uint32_t *)malloc(sizeof(uint32_t) * (m ? m : 1));
	rq = (struct kvp_cl_lreq *)calloc(m ? m : 1, sizeof(*rq));
	for (i = 0; i < m; i++) {
		k[w[i]].st = -EIO; /* until its owner answers */
		k[w[i]].phase = KVP_CK_WAIT;
		used[k[w[i]].owner] = true;
	}
	if (!pos || !rq)
		goto out;
	/* the wave's positions grouped by owner, cut into chunks */
	for (j = 0; j < cl->npeers; j++) {
		uint32_t first = np;

		if (!used[j])
			continue;
		for (i = 0; i < m; i++)
			if (k[w[i]].owner == (int)j)
				pos[np++] = i;
		for (i = first; i < np; i += KVP_LEASE_CHUNK) {
			rq[nr].peer = j;
			rq[nr].first = i;
			rq[nr].cnt = np - i < KVP_LEASE_CHUNK ? np - i :
								KVP_LEASE_CHUNK;
			nr++;
		}
	}
	cl->lreqs = rq;
	cl->nlreqs = nr;
	cl->wk = k;
	cl->ww = w;
	cl->wpos = pos;
	deadline = kvp_cl_now() + tmo;
	moved = cl->wave_moved;
	for (;;) {
		bool wait = false;

		/* LEASEs: at most two outstanding per owner */
		for (r = 0; r < nr; r++) {
			struct kvp_cl_lreq *q = &rq[r];

			if (q->done || q->out || q->msg)
				continue;
			if (outq[q->peer] >= 2) {
				wait = true;
				continue;
			}
			kvp_cl_lease_send(cl, ns, k, w, pos, q);
			outq[q->peer] += q->out;
			wait |= q->out;
		}
		/* LEASEs answered whole, or whose owner failed or restarted */
		for (r = 0; r < nr; r++) {
			struct kvp_cl_lreq *q = &rq[r];
			const struct kvp_peer *p = &cl->peers[q->peer];

			if (!q->out || q->done)
				continue;
			if (q->answered < q->cnt && p->ep && !p->failed &&
			    p->inc == q->inc) {
				wait = true;
				continue;
			}
			q->done = true;
			outq[q->peer]--;
		}
		/* bytes received: into this pool at once */
		for (i = 0; i < m; i++) {
			struct kvp_cl_key *x = &k[w[i]];

			if (x->phase == KVP_CK_RECV) {
				ucs_status_t st =
					kvp_ucx.request_check_status(x->rq);

				if (st == UCS_INPROGRESS) {
					wait = true;
					continue;
				}
				kvp_ucx.request_free(x->rq);
				x->rq = NULL;
				cl->wave_moved++;
				x->phase = st == UCS_OK ? KVP_CK_ARRIVED :
							  KVP_CK_DONE;
			}
			if (x->phase == KVP_CK_ARRIVED)
				kvp_cl_land(cl, c, x);
		}
		if (cl->wave_moved != moved) {
			moved = cl->wave_moved;
			deadline = kvp_cl_now() + tmo;
		}
		if (!wait)
			break;
		/* acquire: the agent is stopping (pairs with the stop's
		 * release): give up like a timeout */
		if (kvp_cl_now() >= deadline || kvp_load_acquire(&cl->stop)) {
			kvp_cl_wave_abort(cl, k, w, m);
			break;
		}
		kvp_cl_progress(cl, 1);
		kvp_cl_drain(cl); /* serve peers meanwhile: they may be
				    * fetching from us */
		kvp_cl_serve_poll(cl);
		kvp_cl_tick(cl);
	}
	/* the LEASE sends (eager, done long ago; bounded if not) */
	for (r = 0; r < nr; r++) {
		if (rq[r].sent)
			kvp_cl_wait_req(cl, rq[r].sent, 100);
		rq[r].sent = NULL;
	}
out:
	cl->lreqs = NULL;
	cl->nlreqs = 0;
	cl->wk = NULL;
	cl->ww = cl->wpos = NULL;
	for (r = 0; rq && r < nr; r++)
		free(rq[r].msg);
	free(rq);
	free(pos);
	for (i = 0; i < m; i++)
		if (k[w[i]].st && k[w[i]].st != -ENOENT)
			kvp_cl_ctr(cl, KVP_CLC_FAILED, 1);
	kvp_cl_set_state(cl, cl->rc ? KVP_CL_UP : KVP_CL_DOWN);
}

/* A FETCH: the keys the directory names an owner for, in waves that fit
 * the receive buffer. */
void
kvp_cl_fetch(struct kvp_cl *cl, const char *ns, struct kvp_cl_key *k,
	     uint32_t n)
{
	struct kvp_nsh *nh = kvp_cl_nsh(cl, ns);
	struct kvp_client *c = nh ? nh->c : NULL;
	uint32_t *w, i = 0;
	uint64_t maxv = cl->a->seg.g.g_max_value;

	w = (uint32_t *)malloc(sizeof(uint32_t) * (n ? n : 1));
	for (i = 0; i < n; i++) {
		k[i].st = k[i].owner < 0 ? -ENOENT : -EBUSY;
		if (k[i].owner >= 0 &&
		    (k[i].dlen > cl->rx_len || k[i].dlen > maxv || !k[i].dlen))
			k[i].st = k[i].dlen ? -E2BIG : -ENOENT;
	}
	if (!c || !w) {
		free(w);
		kvp_cl_nsh_put(nh);
		return;
	}
	i = 0;
	while (i < n) {
		uint32_t m = 0;
		uint64_t used = 0;

		for (; i < n && m < KVP_WAVE_KEYS; i++) {
			uint64_t need = (k[i].dlen + 63) & ~63ull;

			if (k[i].st != -EBUSY)
				continue; /* answered already */
			if (used + need > cl->rx_len)
				break;
			k[i].off = used;
			used += need;
			w[m++] = i;
		}
		/* acquire: pairs with the stop's release */
		if (!m || kvp_load_acquire(&cl->stop))
			break;
		kvp_cl_wave(cl, c, ns, k, w, m);
	}
	free(w);
	kvp_cl_nsh_put(nh);
}
