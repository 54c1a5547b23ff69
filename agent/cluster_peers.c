/* SPDX-License-Identifier: MIT */
/*
 * cluster_peers.c - the remote tier's peers: membership (our name
 * claimed, our node entry refreshed, the members read and admitted),
 * the peer table, endpoints made from node entries and closed (which
 * ends what we served the peer).  Design in agent/cluster_int.h.
 */
#include "agent/cluster_int.h"

/* Close peer p's endpoint (forced: UCX ends every operation on it, our
 * sends and receives included), and end what we served it. */
void
kvp_cl_peer_close(struct kvp_cl *cl, struct kvp_peer *p)
{
	if (p->ep) {
		ucp_request_param_t prm;

		memset(&prm, 0, sizeof(prm));
		prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
		kvp_cl_wait_req(cl, kvp_ucx.ep_close_nbx(p->ep, &prm), 1000);
		p->ep = NULL;
	}
	kvp_cl_serve_peer_gone(cl, (unsigned)(p - cl->peers));
}

/* A peer's node entry (HGETALL reply): connect, or reconnect if it is a
 * new incarnation or its endpoint failed. */
static void
kvp_cl_peer_update(struct kvp_cl *cl, struct kvp_peer *p, redisReply *r)
{
	const char *addr = NULL, *sec = NULL, *proto = NULL;
	size_t addrl = 0, secl = 0, k;
	uint64_t inc = 0;
	unsigned char *buf = NULL;
	ucp_ep_params_t ep;
	ucs_status_t st;

	/* every field checked, the address survived a probe of its own */
	if (!kvp_cl_entry_ready(cl, p, r))
		return;
	for (k = 0; k + 1 < r->elements; k += 2) {
		const redisReply *f = r->element[k], *v = r->element[k + 1];

		if (f->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue;
		if (!strcmp(f->str, "addr"))
			addr = v->str, addrl = v->len;
		else if (!strcmp(f->str, "secret"))
			sec = v->str, secl = v->len;
		else if (!strcmp(f->str, "proto"))
			proto = v->str;
		else if (!strcmp(f->str, "inc"))
			inc = strtoull(v->str, NULL, 10);
	}
	/* a node of another wire format (an older kvpool: one-sided gets)
	 * is not a peer of ours */
	if (!addr || !sec || !inc || !proto || strcmp(proto, KVP_WIRE_PROTO)) {
		p->live = false;
		return;
	}
	p->live = true;
	if (p->ep && !p->failed && p->inc == inc)
		return;
	kvp_cl_peer_close(cl, p);
	p->failed = false;
	p->inc = inc;
	if (kvp_unhex(sec, secl, p->secret, sizeof(p->secret)) != 16)
		goto bad;
	buf = (unsigned char *)malloc(addrl / 2 + 1);
	if (!buf || kvp_unhex(addr, addrl, buf, addrl / 2) < 1)
		goto bad;
	memset(&ep, 0, sizeof(ep));
	ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.address = (const ucp_address_t *)buf;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = kvp_cl_ep_error;
	ep.err_handler.arg = p;
	st = kvp_ucx.ep_create(cl->worker, &ep, &p->ep);
	if (st != UCS_OK) {
		p->ep = NULL;
		goto bad;
	}
	free(buf);
	kvp_log(KVP_LOG_INFO, "cluster", "peer %s (incarnation %llu) connected",
		p->name, (unsigned long long)inc);
	return;
bad:
	free(buf);
	if (p->warned_inc != inc)
		kvp_log(KVP_LOG_WARN, "cluster",
			"peer %s: bad node entry, or no endpoint to it (retried "
			"while it is in the directory)",
			p->name);
	p->warned_inc = inc;
	kvp_cl_peer_close(cl, p);
	p->failed = true;
}

struct kvp_peer *
kvp_cl_peer(struct kvp_cl *cl, const char *name, bool add)
{
	unsigned k;

	for (k = 0; k < cl->npeers; k++)
		if (!strcmp(cl->peers[k].name, name))
			return &cl->peers[k];
	if (!add || strlen(name) >= sizeof(cl->peers[0].name))
		return NULL;
	if (cl->npeers == KVP_CL_MAX_PEERS) {
		/* full: reuse the entry of a node that left (no endpoint
		 * left, nothing of ours waiting on it) */
		for (k = 0; k < cl->npeers; k++)
			if (!cl->peers[k].live && !cl->peers[k].ep)
				break;
		if (k == cl->npeers)
			return NULL;
		kvp_cl_peer_close(cl, &cl->peers[k]);
		kvp_cl_probe_cancel(cl, &cl->peers[k], false);
	} else {
		k = cl->npeers++;
	}
	memset(&cl->peers[k], 0, sizeof(cl->peers[0]));
	snprintf(cl->peers[k].name, sizeof(cl->peers[0].name), "%s", name);
	return &cl->peers[k];
}

/* Membership: our name claimed (kvp_cl_claim), our node entry refreshed,
 * the members read and their entries checked (three round trips, every
 * ttl/3).  While the name is another agent's, nothing else. */
void
kvp_cl_membership(struct kvp_cl *cl)
{
	const struct kvp_agent_cfg *cfg = &cl->a->cfg;
	char key[128], dkey[128], inc[24], cap[24], ttl[24];
	redisReply *r[6], **rep = NULL;
	unsigned k, n = 0, j;
	int claim;

	cl->last_member_ns = kvp_cl_now();
	claim = kvp_cl_claim(cl);
	if (!cl->rc)
		return;
	if (claim == 0 || (claim < 0 && !cl->claimed)) {
		kvp_cl_set_state(cl, claim == 0 ? KVP_CL_CLASH : KVP_CL_DOWN);
		return;
	}
	snprintf(key, sizeof(key), "kvpool:node:%s", cfg->node);
	snprintf(dkey, sizeof(dkey), "kvpool:dir:%s", cfg->node);
	snprintf(inc, sizeof(inc), "%u", cl->inc);
	snprintf(cap, sizeof(cap), "%llu",
		 (unsigned long long)cl->a->seg.L.len[KVP_R_ARENA]);
	snprintf(ttl, sizeof(ttl), "%u", cfg->cluster_ttl_ms);
	{
		const char *argv[] = { "HSET",     key,
				       "addr",     cl->addr_hex,
				       "proto",    KVP_WIRE_PROTO,
				       "secret",   cl->secret_hex,
				       "pool",     cfg->pool,
				       "capacity", cap,
				       "inc",      inc };

		redisAppendCommandArgv(cl->rc, 14, argv, NULL);
	}
	redisAppendCommand(cl->rc, "PEXPIRE %s %s", key, ttl);
	redisAppendCommand(cl->rc, "SADD kvpool:members %s", cfg->node);
	redisAppendCommand(cl->rc, "PEXPIRE %s %s", dkey, ttl);
	redisAppendCommand(cl->rc, "HLEN %s", dkey);
	redisAppendCommand(cl->rc, "SMEMBERS kvpool:members");
	if (!kvp_cl_replies(cl, r, 6))
		return;
	for (k = 0; k < 4; k++)
		kvp_cl_rerr(cl, r[k], "registering this node");
	/* our directory hash expired (a stall longer than the TTL) or Redis
	 * lost it, or holds what we did not publish: publish everything
	 * again */
	if (!kvp_cl_rerr(cl, r[4], "registering this node") &&
	    r[4]->type == REDIS_REPLY_INTEGER) {
		uint64_t mine = 0, i;

		for (i = 0; i < cl->nslots; i++)
			mine += cl->pub[i].gen1 != 0;
		if ((uint64_t)r[4]->integer != mine)
			cl->republish = true;
	}
	if (kvp_cl_rerr(cl, r[5], "reading the members") ||
	    r[5]->type != REDIS_REPLY_ARRAY)
		goto out; /* the peers as they were */
	for (k = 0; k < cl->npeers; k++) {
		cl->peers[k].live = false;
		cl->peers[k].pending = false;
	}
	cl->nbad_now = 0;
	cl->refuse_logs = cl->refuse_quiet = 0;
	for (k = 0; k < r[5]->elements; k++) {
		const redisReply *m = r[5]->element[k];

		if (m->type != REDIS_REPLY_STRING ||
		    (m->len == strlen(cfg->node) &&
		     !memcmp(m->str, cfg->node, m->len)))
			continue;
		if (!kvp_cl_name_ok(m->str, m->len)) {
			kvp_cl_entry_admit(cl, m->str, m->len, NULL);
			continue;
		}
		redisAppendCommand(cl->rc, "HGETALL kvpool:node:%s", m->str);
		n++;
	}
	if (n) {
		rep = (redisReply **)calloc(n, sizeof(*rep));
		if (!rep || !kvp_cl_replies(cl, rep, n)) {
			/* not read: the connection is down (no reply may be
			 * left in it) */
			if (rep == NULL)
				kvp_cl_dir_down(cl, "out of memory");
			goto out;
		}
	}
	for (k = 0, j = 0; k < r[5]->elements; k++) {
		const redisReply *m = r[5]->element[k];
		struct kvp_peer *p;

		if (m->type != REDIS_REPLY_STRING ||
		    (m->len == strlen(cfg->node) &&
		     !memcmp(m->str, cfg->node, m->len)) ||
		    !kvp_cl_name_ok(m->str, m->len))
			continue;
		if ((rep[j]->type == REDIS_REPLY_ARRAY && !rep[j]->elements) ||
		    rep[j]->type == REDIS_REPLY_NIL) {
			/* gone: its entry expired */
			redisReply *x = (redisReply *)redisCommand(
				cl->rc, "SREM kvpool:members %s", m->str);

			if (!x) {
				kvp_cl_dir_down(cl, "I/O error");
				break;
			}
			kvp_cl_rerr(cl, x, "removing a member that left");
			freeReplyObject(x);
		} else if (kvp_cl_entry_admit(cl, m->str, m->len, rep[j])) {
			p = kvp_cl_peer(cl, m->str, true);
			if (p)
				kvp_cl_peer_update(cl, p, rep[j]);
		}
		j++;
	}
	for (j = 0; j < n; j++)
		freeReplyObject(rep[j]);
	cl->nbad = cl->nbad_now;
	if (cl->refuse_quiet)
		kvp_log(KVP_LOG_WARN, "cluster",
			"%u more members refused, logged on later looks",
			cl->refuse_quiet);
	/* a peer out of the directory is asked nothing from now on; its
	 * endpoint is closed only after two TTLs (closing it resets the
	 * connection its own endpoint to us may share: a peer that was
	 * only late to re-register, after a Redis restart, keeps working) */
	for (k = 0; k < cl->npeers; k++) {
		struct kvp_peer *p = &cl->peers[k];

		if (p->live) {
			p->seen_ns = kvp_cl_now();
			p->said_gone = false;
			continue;
		}
		if (!p->said_gone && !p->pending && p->ent_ok) {
			kvp_log(KVP_LOG_INFO, "cluster",
				"peer %s left the directory", p->name);
			p->said_gone = true;
		}
		if (p->ep && kvp_cl_now() - p->seen_ns >
				     2ull * cfg->cluster_ttl_ms * 1000000ull)
			kvp_cl_peer_close(cl, p);
	}
out:
	free(rep);
	for (k = 0; k < 6; k++)
		if (r[k])
			freeReplyObject(r[k]);
	if (cl->rc)
		kvp_cl_set_state(cl, KVP_CL_UP);
}
