/* SPDX-License-Identifier: MIT */
/*
 * cluster_serve.c - the owner's side of the remote tier: a LEASE served
 * (the requester checked, a timed lease per key or a staged copy in the
 * bounce buffer, a DATA message per key), leases renewed while UCX sends
 * (I36), a peer that stops taking our bytes dropped.  Design in
 * agent/cluster_int.h.
 */
#include "agent/cluster_int.h"

/* ---- the owner's side: serving a LEASE ---- */

/* Renew the leases of job sv's sends still in flight (a fresh lease on
 * the same key, taken while the old one holds the value where it is, then
 * the old one released); false if one could not be renewed. */
static bool
kvp_cl_serve_renew(struct kvp_cl *cl, struct kvp_serve *sv)
{
	uint32_t ttl = cl->a->cfg.remote_lease_ms, i;

	for (i = 0; i < sv->n; i++) {
		struct kvp_serve_key *sk = &sv->k[i];
		struct kvp_lease l;

		if (!sk->rq || sk->kind != 1)
			continue;
		if (kvp_lease_acquire(sv->nsh->c, sk->key, sk->klen, ttl, &l))
			return false;
		if (l.seg_off != sk->l.seg_off || l.len != sk->l.len) {
			kvp_lease_release(sv->nsh->c, &l);
			return false; /* never: a leased value does not move */
		}
		kvp_lease_release(sv->nsh->c, &sk->l);
		sk->l = l;
	}
	sv->deadline = kvp_cl_now() + ttl * 750000ull;
	return true;
}

/*
 * Sends that completed end their holds; a job whose sends are all done
 * is freed.  A job at its deadline renews its leases while its peer takes
 * our bytes; a peer that took none for --remote-timeout-ms (it stopped
 * reading) is dropped: its endpoint is closed (forced), which ends the
 * sends before any lease behind them can run out (I36), and the peer is
 * asked again only when the directory names it again.  Never waits.
 */
void
kvp_cl_serve_poll(struct kvp_cl *cl)
{
	struct kvp_serve **pp = &cl->serving;
	uint64_t now = kvp_cl_now(),
		 tmo = cl->a->cfg.remote_timeout_ms * 1000000ull;

	while (*pp) {
		struct kvp_serve *sv = *pp;
		struct kvp_peer *p = &cl->peers[sv->peer];
		uint32_t i;

		for (i = 0; i < sv->n && sv->left; i++) {
			struct kvp_serve_key *sk = &sv->k[i];

			if (!sk->rq || kvp_ucx.request_check_status(sk->rq) ==
					       UCS_INPROGRESS)
				continue;
			kvp_ucx.request_free(sk->rq);
			sk->rq = NULL;
			kvp_cl_serve_key_end(cl, sv, sk);
			sv->left--;
			p->took_ns = now;
		}
		if (sv->left && now >= sv->deadline &&
		    (now - p->took_ns > tmo || !kvp_cl_serve_renew(cl, sv))) {
			kvp_log(KVP_LOG_WARN, "cluster",
				"peer %s took none of our pages for %llu ms (%u in flight): "
				"dropped until the directory names it again",
				p->name,
				(unsigned long long)((now - p->took_ns) /
						     1000000u),
				sv->left);
			kvp_cl_ctr(cl, KVP_CLC_STALLED, 1);
			p->failed = true;
			/* ends this job (and the peer's others) */
			kvp_cl_peer_close(cl, p);
			pp = &cl->serving; /* the list changed */
			continue;
		}
		if (sv->left) {
			pp = &sv->next;
			continue;
		}
		*pp = sv->next;
		kvp_cl_nsh_put(sv->nsh);
		free(sv);
	}
}

/* Does peer 'peer' have a job in flight? */
static bool
kvp_cl_serving_peer(const struct kvp_cl *cl, unsigned peer)
{
	const struct kvp_serve *sv;

	for (sv = cl->serving; sv; sv = sv->next)
		if (sv->peer == peer)
			return true;
	return false;
}

/* Send key i's answer (and its bytes when status 0) of job sv. */
static void
kvp_cl_serve_send(struct kvp_cl *cl, struct kvp_serve *sv, uint32_t i,
		  const void *bytes)
{
	struct kvp_serve_key *sk = &sv->k[i];
	struct kvp_peer *p = &cl->peers[sv->peer];
	ucp_request_param_t prm;
	void *rq;

	if (sk->h.status == 0)
		sk->h.crc = kvp_crc32c(0, bytes, sk->h.len);
	if (!p->ep || p->failed)
		goto done;
	memset(&prm, 0, sizeof(prm));
	rq = kvp_ucx.am_send_nbx(p->ep, KVP_AM_DATA, &sk->h, sizeof(sk->h),
				 sk->h.status ? NULL : bytes,
				 sk->h.status ? 0 : sk->h.len, &prm);
	if (UCS_PTR_IS_ERR(rq))
		goto done;
	if (rq) {
		sk->rq = rq;
		sv->left++;
		return;
	}
done:
	kvp_cl_serve_key_end(cl, sv, sk);
}

/*
 * A LEASE from a peer: validated, each key leased (a value in DRAM in one
 * run is sent from where it lies, under a timed lease; any other is read
 * into the bounce buffer first, through our own agent), and answered by
 * one DATA message per key.  The sends are left in flight
 * (kvp_cl_serve_poll ends them): nothing here waits on the peer.
 */
static void
kvp_cl_serve_lease(struct kvp_cl *cl, const unsigned char *m, size_t len)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	struct kvp_wire_hdr h;
	struct kvp_peer *p;
	const unsigned char *d, *end;
	char ns[KVP_NS_NAME_MAX + 1];
	struct kvp_serve *sv = NULL;
	struct kvp_client *c;
	struct kvp_op *bo = NULL;
	uint32_t k, *bk = NULL, nb = 0;

	if (len < sizeof(h))
		goto refuse;
	memcpy(&h, m, sizeof(h));
	h.from[sizeof(h.from) - 1] = 0;
	if (h.magic != KVP_WIRE_MAGIC || h.bytes != len - sizeof(h) ||
	    memcmp(h.secret, cl->secret, 16) || h.n == 0 ||
	    h.n > KVP_LEASE_CHUNK || h.inc != cl->inc || !h.req)
		goto refuse;
	p = kvp_cl_peer(cl, h.from, false);
	if ((!p || !p->live || !p->ep || p->failed) && cl->rc &&
	    kvp_cl_now() - cl->last_member_ns > 20000000ull) {
		/* a node we do not know (yet) presents our secret: it may
		 * have registered since our last look (or come back): look
		 * now rather than let it wait for nothing */
		kvp_cl_membership(cl);
		p = kvp_cl_peer(cl, h.from, false);
	}
	if (!p || !p->live || !p->ep || p->failed)
		goto refuse; /* not a member of the directory (now) */
	/* the whole message is checked before anything is taken */
	d = m + sizeof(h);
	end = d + h.bytes;
	if (d >= end || d[0] == 0 || (size_t)(end - d) < 1u + d[0])
		goto refuse;
	memcpy(ns, d + 1, d[0]);
	ns[d[0]] = 0;
	if (strlen(ns) != d[0])
		goto refuse; /* a NUL inside the name */
	d += 1 + d[0];
	{
		const unsigned char *q = d;

		for (k = 0; k < h.n; k++) {
			if (q >= end || q[0] == 0 ||
			    (size_t)(end - q) < 1u + q[0])
				goto refuse;
			q += 1 + q[0];
		}
		if (q != end)
			goto refuse;
	}
	sv = (struct kvp_serve *)calloc(1,
					sizeof(*sv) + h.n * sizeof(sv->k[0]));
	bo = (struct kvp_op *)calloc(h.n, sizeof(*bo));
	bk = (uint32_t *)calloc(h.n, sizeof(*bk));
	if (!sv || !bo || !bk)
		goto out;
	sv->peer = (unsigned)(p - cl->peers);
	sv->n = h.n;
	sv->deadline = kvp_cl_now() + cfg->remote_lease_ms * 750000ull;
	sv->nsh = kvp_cl_nsh(cl, ns);
	c = sv->nsh ? sv->nsh->c : NULL;
	for (k = 0; k < h.n; k++) {
		struct kvp_serve_key *sk = &sv->k[k];
		const unsigned char *key = d + 1;
		uint32_t klen = d[0];
		struct kvp_lease l;
		uint64_t off;
		int rc;

		d += 1 + klen;
		sk->klen = (uint8_t)klen;
		memcpy(sk->key, key, klen);
		sk->h.magic = KVP_WIRE_MAGIC;
		sk->h.req = h.req;
		memcpy(sk->h.secret, p->secret, 16);
		snprintf(sk->h.from, sizeof(sk->h.from), "%s", cfg->node);
		sk->h.inc = cl->inc;
		sk->h.idx = k;
		sk->h.status = -EBUSY;
		if (!c)
			continue;
		rc = kvp_lease_acquire(c, key, klen, cfg->remote_lease_ms, &l);
		if (rc) {
			sk->h.status = rc == -ENOENT ? -ENOENT : -EBUSY;
			continue;
		}
		if (l.tier == (int)KVP_TIER_DRAM && l.seg_off &&
		    c->seg.base + l.seg_off >= cl->arena_base &&
		    c->seg.base + l.seg_off + l.len <=
			    cl->arena_base + cl->arena_len) {
			sk->kind = 1;
			sk->l = l;
			sk->h.status = 0;
			sk->h.len = l.len;
			continue;
		}
		/* SSD-resident, or in several runs: read below, with the
		 * others, into the bounce buffer (staged by our own agent:
		 * one batch) */
		kvp_lease_release(c, &l);
		if (l.len > cl->bounce_len) {
			sk->h.status = -E2BIG;
			continue;
		}
		if (kvp_cl_bounce_alloc(cl, l.len, &off))
			continue; /* -EBUSY */
		sk->kind = 2;
		sk->boff = off;
		sk->blen = l.len;
		sk->h.len = l.len;
		bo[nb].key = key;
		bo[nb].klen = klen;
		bo[nb].buf = cl->bounce + off;
		bo[nb].off = 0;
		bo[nb].len = l.len;
		bk[nb++] = k;
	}
	if (nb)
		kvp_batch_get(c, bo, nb);
	for (k = 0; k < nb; k++) {
		struct kvp_serve_key *sk = &sv->k[bk[k]];

		if (bo[k].status || bo[k].len != sk->h.len) {
			sk->h.status = bo[k].status == -ENOENT ? -ENOENT :
				       bo[k].status == -EBUSY  ? -EBUSY :
				       bo[k].status            ? -EIO :
								 -ENOENT;
			kvp_cl_serve_key_end(cl, sv, sk);
			continue;
		}
		sk->h.status = 0;
	}
	for (k = 0; k < h.n; k++) {
		struct kvp_serve_key *sk = &sv->k[k];
		const void *bytes =
			sk->kind == 1 ? sv->nsh->c->seg.base + sk->l.seg_off :
			sk->kind == 2 ? cl->bounce + sk->boff :
					NULL;

		if (sk->h.status == 0) {
			kvp_cl_ctr(cl, KVP_CLC_SERVED, 1);
			kvp_cl_ctr(cl, KVP_CLC_SERVED_BYTES, sk->h.len);
		}
		kvp_cl_serve_send(cl, sv, k, bytes);
	}
	if (sv->left) {
		/* the peer's clock of progress starts with its first job */
		if (!p->took_ns || !kvp_cl_serving_peer(cl, sv->peer))
			p->took_ns = kvp_cl_now();
		sv->next = cl->serving;
		cl->serving = sv;
		sv = NULL;
	}
out:
	if (sv) {
		kvp_cl_nsh_put(sv->nsh);
		free(sv);
	}
	free(bo);
	free(bk);
	return;
refuse:
	kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
}

void
kvp_cl_drain(struct kvp_cl *cl)
{
	while (cl->inq) {
		struct kvp_inmsg *q = cl->inq;

		cl->inq = q->next;
		if (!cl->inq)
			cl->inq_tail = &cl->inq;
		kvp_cl_serve_lease(cl, q->data, q->len);
		free(q);
	}
}
