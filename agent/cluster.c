/* SPDX-License-Identifier: MIT */
/*
 * cluster.c - the remote tier's thread and lifecycle (kvpoold --cluster
 * redis://HOST:PORT --node NAME): the AM handler, the waker, the loop,
 * start and stop.  The design, and which file owns what, in
 * agent/cluster_int.h.
 */
#include "agent/cluster_int.h"

/* The AM handler (inside ucp_worker_progress, on this file's thread): a
 * LEASE is queued for the loop; a DATA lands in the wave it answers, or
 * is dropped.  Nothing here trusts the sender. */
static ucs_status_t
kvp_cl_am(void *arg, const void *header, size_t hlen, void *data, size_t len,
	  const ucp_am_recv_param_t *prm)
{
	struct kvp_am_arg *aa = (struct kvp_am_arg *)arg;
	struct kvp_cl *cl = aa->cl;
	bool rndv = (prm->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
	struct kvp_inmsg *q;

	if (aa->id == KVP_AM_DATA) {
		struct kvp_wire_data h;

		if (hlen != sizeof(h)) {
			kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
			return UCS_OK; /* a rendezvous dropped: never read */
		}
		memcpy(&h, header, sizeof(h));
		kvp_cl_data(cl, &h, data, len, rndv);
		return UCS_OK;
	}
	/* a LEASE: eager and small (we send no other kind); no other id is
	 * ours */
	if (aa->id != KVP_AM_LEASE || rndv || hlen ||
	    len < sizeof(struct kvp_wire_hdr) || len > (1u << 20)) {
		kvp_cl_ctr(cl, KVP_CLC_REFUSED, 1);
		return UCS_OK;
	}
	q = (struct kvp_inmsg *)malloc(sizeof(*q) + len);
	if (!q)
		return UCS_OK;
	q->next = NULL;
	q->len = len;
	memcpy(q->data, data, len);
	*cl->inq_tail = q;
	cl->inq_tail = &q->next;
	return UCS_OK;
}

/* ---- the thread ---- */

static void *
kvp_cl_waker(void *arg)
{
	struct kvp_cl *cl = (struct kvp_cl *)arg;
	unsigned last = 0;

	/* acquire: pairs with the stop's release */
	while (!kvp_load_acquire(&cl->stop)) {
		/* acquire: pairs with the clients' bump */
		unsigned cur = kvp_iload_acquire(&cl->shm->cl_wake);
		uint64_t one = 1;

		if (cur != last) {
			last = cur;
			if (write(cl->evfd, &one, sizeof(one)) < 0) {
				/* the counter is full: it is readable */
			}
		}
		kvp_futex_wait(&cl->shm->cl_wake, cur, 100000000ull);
	}
	return NULL;
}

static void *
kvp_cl_main(void *arg)
{
	struct kvp_cl *cl = (struct kvp_cl *)arg;

	/* acquire: pairs with the stop's release */
	while (!kvp_load_acquire(&cl->stop)) {
		uint64_t now, next;

		while (kvp_ucx.worker_progress(cl->worker))
			;
		kvp_cl_drain(cl);
		kvp_cl_tick(cl);
		kvp_cl_mailboxes(cl, false);
		kvp_cl_serve_poll(cl);
		next = cl->next_pub_ns < cl->next_member_ns ?
			       cl->next_pub_ns :
			       cl->next_member_ns;
		now = kvp_cl_now();
		/* asleep until UCX has work (its event fd: a peer's message,
		 * a get to serve), a client posts (ours), or a timer */
		kvp_cl_progress(
			cl,
			next > now ? (int)((next - now) / 1000000ull) + 1 : 1);
	}
	kvp_cl_mailboxes(cl, true);
	return NULL;
}

/* ---- start / stop ---- */

static int
kvp_cl_read_pw(struct kvp_cl *cl, const char *path)
{
	FILE *f = fopen(path, "r");
	struct stat st;

	if (!f) {
		kvp_log(KVP_LOG_ERROR, "cluster",
			"--cluster-password-file %s: %s", path,
			strerror(errno));
		return -1;
	}
	if (!fstat(fileno(f), &st) && (st.st_mode & 0077))
		kvp_log(KVP_LOG_WARN, "cluster",
			"%s is readable by others: chmod 600 it", path);
	if (!fgets(cl->pw, sizeof(cl->pw), f))
		cl->pw[0] = 0;
	fclose(f);
	cl->pw[strcspn(cl->pw, "\r\n")] = 0;
	return 0;
}

static void kvp_cl_free(struct kvp_cl *cl);

int
kvp_cluster_start_agent(struct kvp_agent *a)
{
	struct kvp_agent_cfg *cfg = &a->cfg;
	struct kvp_cl *cl;
	ucp_config_t *uc = NULL;
	ucp_params_t up;
	ucp_worker_params_t wp;
	ucp_address_t *addr = NULL;
	size_t alen = 0;
	unsigned k;
	struct kvp_nsh *c0;

	cl = (struct kvp_cl *)calloc(1, sizeof(*cl));
	if (!cl)
		return -1;
	cl->a = a;
	cl->evfd = -1;
	cl->inq_tail = &cl->inq;
	if (!cfg->node[0]) {
		/* the short hostname, cut to the name's room */
		char h[256] = "";
		const char *nm;

		gethostname(h, sizeof(h) - 1);
		h[strcspn(h, ".")] = 0;
		h[sizeof(cfg->node) - 1] = 0;
		nm = h[0] ? h : "node";
		memcpy(cfg->node, nm, strlen(nm) + 1);
	}
	if (kvp_cl_parse_url(cl, cfg->cluster_url)) {
		kvp_log(KVP_LOG_ERROR, "cluster",
			"--cluster: want redis://[:PASSWORD@]HOST[:PORT]");
		goto fail;
	}
	if (cfg->cluster_pwfile[0] && kvp_cl_read_pw(cl, cfg->cluster_pwfile))
		goto fail;
	cl->shm = a->seg.cluster;
	if (!cl->shm)
		kvp_log(KVP_LOG_WARN, "cluster",
			"the segment was made without remote mailboxes (an agent without --cluster "
			"created it): this node publishes and serves its pages, its clients cannot "
			"fetch; stop the workers and the agent, remove the segment, restart");
	/* relaxed: this agent wrote it before its threads started */
	cl->inc = (uint32_t)kvp_load_relaxed(&a->seg.hdr->h_incarnation);
	{
		/* who claims the node name: this host, this pool, this
		 * segment (its creation time: an agent restarted on it is
		 * the same claimant) */
		char h[64] = "";

		gethostname(h, sizeof(h) - 1);
		snprintf(cl->claim_id, sizeof(cl->claim_id), "%s/%s/%llu", h,
			 cfg->pool,
			 (unsigned long long)a->seg.hdr->h_create_ns);
	}
	if (getrandom(cl->secret, sizeof(cl->secret), 0) !=
		    sizeof(cl->secret) ||
	    getrandom(cl->rng, sizeof(cl->rng), 0) != sizeof(cl->rng))
		goto fail;
	cl->rng[0] |= 1;
	kvp_hex(cl->secret, 16, cl->secret_hex);
	cl->nslots = a->seg.g.g_index_slots;
	cl->pub = (struct kvp_pub *)calloc(cl->nslots, sizeof(*cl->pub));
	cl->req_cap = (uint64_t)a->seg.g.g_rbox_kib << 10;
	cl->req = (unsigned char *)malloc(cl->req_cap ? cl->req_cap : 1);
	cl->bounce_len = cl->rx_len = cfg->remote_buffer;
	cl->bounce = (unsigned char *)aligned_alloc(4096, cl->bounce_len);
	cl->rx = (unsigned char *)aligned_alloc(4096, cl->rx_len);
	cl->bounce_map =
		(uint8_t *)calloc(cl->bounce_len / KVP_BOUNCE_UNIT + 1, 1);
	if (!cl->pub || !cl->req || !cl->bounce || !cl->rx || !cl->bounce_map)
		goto fail;
	/* UCX: active messages only, one worker, this thread.  No one-sided
	 * feature (UCP's software RMA handlers are not installed), no memory
	 * mapped for remote access, and TCP's PUT (a write to whatever
	 * address the peer names, unchecked) off: a peer gets bytes only as
	 * our DATA messages, and writes nothing (docs/design.md) */
	if (kvp_cl_load_ucx())
		goto fail;
	if (kvp_ucx.config_read(NULL, NULL, &uc) != UCS_OK)
		goto ucx_fail;
	if (kvp_ucx.config_modify(uc, "TCP_PUT_ENABLE", "n") != UCS_OK) {
		kvp_ucx.config_release(uc);
		goto ucx_fail;
	}
	memset(&up, 0, sizeof(up));
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
	if (kvp_ucx.init_version(UCP_API_MAJOR, UCP_API_MINOR, &up, uc,
				 &cl->ctx) != UCS_OK) {
		cl->ctx = NULL;
		kvp_ucx.config_release(uc);
		goto ucx_fail;
	}
	kvp_ucx.config_release(uc);
	memset(&wp, 0, sizeof(wp));
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	if (kvp_ucx.worker_create(cl->ctx, &wp, &cl->worker) != UCS_OK) {
		cl->worker = NULL;
		goto ucx_fail;
	}
	if (kvp_ucx.worker_get_efd(cl->worker, &cl->ucx_fd) != UCS_OK)
		goto ucx_fail;
	/* a handler for every id a peer can name (16 bits), registered in
	 * increasing order: UCX 1.13 grows its table of handlers past the
	 * id registered without clearing the new entries, counts them valid,
	 * and calls whatever an unset entry holds when a peer sends that id
	 * (an ASan agent died of it: tests/cluster/test_hostile_peer.sh,
	 * forged messages).  Ids not ours are refused by kvp_cl_am. */
	for (k = 0; k < 3; k++) {
		cl->am_arg[k].cl = cl;
		cl->am_arg[k].id = k == 0 ? KVP_AM_LEASE :
				   k == 1 ? KVP_AM_DATA :
					    0xffffffffu;
	}
	for (k = 0; k <= 0xffffu; k++) {
		ucp_am_handler_param_t hp;

		memset(&hp, 0, sizeof(hp));
		hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
				UCP_AM_HANDLER_PARAM_FIELD_CB |
				UCP_AM_HANDLER_PARAM_FIELD_ARG;
		hp.id = k;
		hp.cb = kvp_cl_am;
		hp.arg = &cl->am_arg[k == KVP_AM_LEASE ? 0 :
				     k == KVP_AM_DATA  ? 1 :
							 2];
		if (kvp_ucx.worker_set_am_recv_handler(cl->worker, &hp) !=
		    UCS_OK)
			goto ucx_fail;
	}
	if (kvp_ucx.worker_get_address(cl->worker, &addr, &alen) != UCS_OK)
		goto ucx_fail;
	cl->addr_hex = kvp_hex_alloc(addr, alen);
	kvp_ucx.worker_release_address(cl->worker, addr);
	/* the arena as our client handles map it (one mapping per process:
	 * every handle's leases point into it); this handle stays referenced
	 * (never recycled) for the agent's life */
	c0 = kvp_cl_nsh(cl, "kvpool.cluster");
	if (!c0) {
		kvp_log(KVP_LOG_ERROR, "cluster",
			"cannot open the pool as a client");
		goto fail;
	}
	cl->arena_base = c0->c->seg.base + c0->c->seg.L.off[KVP_R_ARENA];
	cl->arena_len = c0->c->seg.L.len[KVP_R_ARENA];
	if (!cl->addr_hex)
		goto ucx_fail;
	cl->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cl->evfd < 0)
		goto fail;
	if (cl->shm) {
		kvp_cl_node_store(cl, cfg->node);
		kvp_cl_set_state(cl, KVP_CL_DOWN);
	}
	a->cl = cl;
	if (pthread_create(&cl->thr, NULL, kvp_cl_main, cl))
		goto fail;
	cl->thr_up = true;
	if (cl->shm) {
		if (pthread_create(&cl->waker, NULL, kvp_cl_waker, cl))
			goto fail;
		cl->waker_up = true;
	}
	kvp_log(KVP_LOG_INFO, "cluster",
		"node '%s': directory %s:%d%s, lease %u ms, TTL %u ms, publish every %u ms",
		cfg->node, cl->host, cl->port, cl->pw[0] ? " (password)" : "",
		cfg->remote_lease_ms, cfg->cluster_ttl_ms,
		cfg->cluster_publish_ms);
	return 0;
ucx_fail:
	kvp_log(KVP_LOG_ERROR, "cluster", "UCX could not be set up");
fail:
	a->cl = cl;
	kvp_cluster_stop_agent(a);
	return -1;
}

static void
kvp_cl_free(struct kvp_cl *cl)
{
	unsigned k;

	for (k = 0; k < cl->npeers; k++)
		kvp_cl_probe_cancel(cl, &cl->peers[k], true);
	for (k = 0; k < cl->nzombies; k++) {
		int st;

		waitpid(cl->zombies[k], &st, 0);
	}
	if (cl->worker)
		for (k = 0; k < cl->npeers; k++)
			kvp_cl_peer_close(cl, &cl->peers[k]);
	if (cl->worker)
		kvp_ucx.worker_destroy(cl->worker);
	if (cl->ctx)
		kvp_ucx.cleanup(cl->ctx);
	kvp_cl_nsh_close_all(cl);
	while (cl->inq) {
		struct kvp_inmsg *q = cl->inq;

		cl->inq = q->next;
		free(q);
	}
	if (cl->rc)
		redisFree(cl->rc);
	if (cl->evfd >= 0)
		close(cl->evfd);
	free(cl->addr_hex);
	free(cl->bounce);
	free(cl->rx);
	free(cl->bounce_map);
	free(cl->pub);
	free(cl->req);
	memset(cl->pw, 0, sizeof(cl->pw));
	free(cl);
}

void
kvp_cluster_stop_agent(struct kvp_agent *a)
{
	struct kvp_cl *cl = a->cl;

	if (!cl)
		return;
	/* clients stop asking first */
	kvp_cl_state_store(cl, KVP_CL_WORD(cl->inc, 0, KVP_CL_OFF));
	/* release: the threads acquire it */
	kvp_store_release(&cl->stop, 1);
	if (cl->evfd >= 0) {
		uint64_t one = 1;

		if (write(cl->evfd, &one, sizeof(one)) < 0) {
			/* full: readable anyway */
		}
	}
	if (cl->shm)
		kvp_rbox_ring(cl->shm); /* wake the waker */
	if (cl->thr_up)
		pthread_join(cl->thr, NULL);
	if (cl->waker_up)
		pthread_join(cl->waker, NULL);
	/* a clean stop leaves the directory at once (a crash: within
	 * TTL), if the name is ours */
	if (cl->rc && cl->claimed) {
		char ckey[128], key[128], dkey[128];
		const char *argv[] = { NULL,
				       NULL,
				       NULL,
				       ckey,
				       key,
				       dkey,
				       "kvpool:members",
				       cl->claim_id,
				       a->cfg.node };
		size_t argl[9];
		unsigned k;

		snprintf(ckey, sizeof(ckey), "kvpool:claim:%s", a->cfg.node);
		snprintf(key, sizeof(key), "kvpool:node:%s", a->cfg.node);
		snprintf(dkey, sizeof(dkey), "kvpool:dir:%s", a->cfg.node);
		for (k = 3; k < 9; k++)
			argl[k] = strlen(argv[k]);
		kvp_cl_script(cl, kvp_lua_leave, 4, argv, argl, 9, "leaving");
	}
	kvp_cl_free(cl);
	a->cl = NULL;
}
