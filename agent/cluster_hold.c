/* SPDX-License-Identifier: MIT */
/*
 * cluster_hold.c - what this node holds for the remote tier: a client
 * handle of ours per namespace (recycled), bounce-buffer space, what a
 * served key holds (a lease or bounce space) and its release, all of it
 * at once when a peer goes.  Design in agent/cluster_int.h.
 */
#include "agent/cluster_int.h"

/* ---- namespaces: a client handle of ours per namespace ---- */

/*
 * A handle of ours for namespace ns, referenced (kvp_cl_nsh_put when
 * done).  At most KVP_CL_MAX_NS are open; a new namespace takes the
 * entry of the idle one used longest ago (closed first), so a node serves
 * and fetches for any number of namespaces over its life (model
 * rollouts); NULL only when KVP_CL_MAX_NS are in use at once.
 */
struct kvp_nsh *
kvp_cl_nsh(struct kvp_cl *cl, const char *ns)
{
	struct kvp_nsh *h, *victim = NULL, *free_one = NULL;
	struct kvp_client *c = NULL;
	unsigned k;

	for (k = 0; k < KVP_CL_MAX_NS; k++) {
		h = &cl->nsh[k];
		if (!h->c) {
			if (!free_one)
				free_one = h;
			continue;
		}
		if (!strcmp(h->ns, ns)) {
			h->refs++;
			h->used = ++cl->nsh_clock;
			return h;
		}
		if (!h->refs && (!victim || h->used < victim->used))
			victim = h;
	}
	h = free_one ? free_one : victim;
	if (!h) {
		kvp_log(KVP_LOG_WARN, "cluster",
			"%u namespaces in use at once: a request for '%s' is answered BUSY",
			KVP_CL_MAX_NS, ns);
		return NULL;
	}
	if (h->c) {
		kvp_close(h->c);
		h->c = NULL;
	}
	if (kvp_open(cl->a->cfg.pool, ns, &c))
		return NULL;
	/* its gets of remote pages must not ask the network again */
	kvp_remote(c, 0);
	snprintf(h->ns, sizeof(h->ns), "%s", ns);
	h->c = c;
	h->refs = 1;
	h->used = ++cl->nsh_clock;
	return h;
}

/* Every handle of ours closed (the stop).  Here, where they were opened:
 * the client library's registry of its mappings (kvp__maps, one per
 * process in a program of one file) is a static of an inline function, so
 * each file that includes it has its own; a handle is closed by the file
 * that opened it. */
void
kvp_cl_nsh_close_all(struct kvp_cl *cl)
{
	unsigned k;

	for (k = 0; k < KVP_CL_MAX_NS; k++)
		if (cl->nsh[k].c)
			kvp_close(cl->nsh[k].c);
}

void
kvp_cl_nsh_put(struct kvp_nsh *h)
{
	if (h && h->refs)
		h->refs--;
}

int
kvp_cl_bounce_alloc(struct kvp_cl *cl, uint64_t len, uint64_t *off)
{
	uint64_t units = (len + KVP_BOUNCE_UNIT - 1) / KVP_BOUNCE_UNIT,
		 total = cl->bounce_len / KVP_BOUNCE_UNIT, i, run = 0;

	for (i = 0; i < total; i++) {
		run = cl->bounce_map[i] ? 0 : run + 1;
		if (run == units) {
			uint64_t first = i + 1 - units;

			memset(cl->bounce_map + first, 1, units);
			*off = first * KVP_BOUNCE_UNIT;
			return 0;
		}
	}
	return -EBUSY;
}

static void
kvp_cl_bounce_free(struct kvp_cl *cl, uint64_t off, uint64_t len)
{
	memset(cl->bounce_map + off / KVP_BOUNCE_UNIT, 0,
	       (len + KVP_BOUNCE_UNIT - 1) / KVP_BOUNCE_UNIT);
}

/* What a served key holds goes back (its send is complete or ended). */
void
kvp_cl_serve_key_end(struct kvp_cl *cl, struct kvp_serve *sv,
		     struct kvp_serve_key *sk)
{
	if (sk->kind == 1)
		kvp_lease_release(sv->nsh->c, &sk->l);
	else if (sk->kind == 2)
		kvp_cl_bounce_free(cl, sk->boff, sk->blen);
	sk->kind = 0;
}

/* Peer 'peer' is gone (its endpoint closed): its jobs end now (UCX
 * completed their sends with an error when the endpoint closed). */
void
kvp_cl_serve_peer_gone(struct kvp_cl *cl, unsigned peer)
{
	struct kvp_serve **pp = &cl->serving;

	while (*pp) {
		struct kvp_serve *sv = *pp;
		uint32_t i;

		if (sv->peer != peer) {
			pp = &sv->next;
			continue;
		}
		for (i = 0; i < sv->n; i++) {
			struct kvp_serve_key *sk = &sv->k[i];

			if (sk->rq) {
				if (kvp_ucx.request_check_status(sk->rq) ==
				    UCS_INPROGRESS)
					kvp_ucx.request_cancel(cl->worker,
							       sk->rq);
				kvp_ucx.request_free(sk->rq);
				sk->rq = NULL;
			}
			kvp_cl_serve_key_end(cl, sv, sk);
		}
		*pp = sv->next;
		kvp_cl_nsh_put(sv->nsh);
		free(sv);
	}
}
