/* SPDX-License-Identifier: MIT */
/*
 * cluster_ucx.c - the remote tier's transport: UCX, loaded at run time
 * (the function table kvp_ucx), waits on a request, an endpoint's error
 * callback, progress and the sleep on UCX's event fd.  Only active
 * messages: nothing is read or written one-sidedly.  The design of the
 * remote tier, and which file owns what, in agent/cluster_int.h.
 */
#include "agent/cluster_int.h"

/* the UCX table (agent/cluster_int.h), filled by kvp_cl_load_ucx */
struct kvp_ucx kvp_ucx;

/* libucp.so.0 (and libucs.so.0, which it needs) into kvp_ucx; 0 or -1 (logged) */
int
kvp_cl_load_ucx(void)
{
	/* clang-format off */
#define KVP_UCX_SYM(f, field, ucs) { #f, offsetof(__typeof__(kvp_ucx), field), ucs }
	static const struct {
		const char *name;
		size_t off;
		bool ucs;
	} syms[] = {
		KVP_UCX_SYM(ucp_am_data_release, am_data_release, false),
		KVP_UCX_SYM(ucp_am_recv_data_nbx, am_recv_data_nbx, false),
		KVP_UCX_SYM(ucp_am_send_nbx, am_send_nbx, false),
		KVP_UCX_SYM(ucp_cleanup, cleanup, false),
		KVP_UCX_SYM(ucp_config_modify, config_modify, false),
		KVP_UCX_SYM(ucp_config_read, config_read, false),
		KVP_UCX_SYM(ucp_config_release, config_release, false),
		KVP_UCX_SYM(ucp_ep_close_nbx, ep_close_nbx, false),
		KVP_UCX_SYM(ucp_ep_create, ep_create, false),
		KVP_UCX_SYM(ucp_request_cancel, request_cancel, false),
		KVP_UCX_SYM(ucp_request_check_status, request_check_status, false),
		KVP_UCX_SYM(ucp_request_free, request_free, false),
		KVP_UCX_SYM(ucp_worker_arm, worker_arm, false),
		KVP_UCX_SYM(ucp_worker_create, worker_create, false),
		KVP_UCX_SYM(ucp_worker_destroy, worker_destroy, false),
		KVP_UCX_SYM(ucp_worker_get_address, worker_get_address, false),
		KVP_UCX_SYM(ucp_worker_get_efd, worker_get_efd, false),
		KVP_UCX_SYM(ucp_worker_progress, worker_progress, false),
		KVP_UCX_SYM(ucp_worker_release_address, worker_release_address, false),
		KVP_UCX_SYM(ucp_worker_set_am_recv_handler, worker_set_am_recv_handler, false),
		KVP_UCX_SYM(ucs_status_string, status_string, true),
		KVP_UCX_SYM(ucp_init_version, init_version, false),
	};
	/* clang-format on */
#undef KVP_UCX_SYM
	void *ucp, *ucs;
	size_t k;

	if (kvp_ucx.init_version)
		return 0;
	ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
	ucp = ucs ? dlopen("libucp.so.0", RTLD_NOW | RTLD_GLOBAL) : NULL;
	if (!ucp) {
		kvp_log(KVP_LOG_ERROR, "cluster",
			"cannot load UCX (libucp.so.0: %s): install libucx0",
			dlerror());
		return -1;
	}
	for (k = 0; k < sizeof(syms) / sizeof(syms[0]); k++) {
		void *fn = dlsym(syms[k].ucs ? ucs : ucp, syms[k].name);

		if (!fn) {
			kvp_log(KVP_LOG_ERROR, "cluster",
				"UCX has no %s: a newer libucx0 (1.12 or later) is needed",
				syms[k].name);
			memset(&kvp_ucx, 0, sizeof(kvp_ucx));
			return -1;
		}
		memcpy((char *)&kvp_ucx + syms[k].off, &fn, sizeof(fn));
	}
	return 0;
}

/* ---- UCX ---- */

void
kvp_cl_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct kvp_peer *p = (struct kvp_peer *)arg;

	(void)ep;
	p->failed = true;
	kvp_log(KVP_LOG_WARN, "cluster", "peer %s: endpoint failed (%s)",
		p->name, kvp_ucx.status_string(st));
}

/* Wait for a request at most 'ms' (never past a stop): a request still in
 * flight then is cancelled, which completes it.  Only for requests that
 * end on their own in microseconds (an endpoint's forced close). */
void
kvp_cl_wait_req(struct kvp_cl *cl, void *req, unsigned ms)
{
	uint64_t end = kvp_cl_now() + ms * 1000000ull;

	if (!req || UCS_PTR_IS_ERR(req))
		return;
	while (kvp_ucx.request_check_status(req) == UCS_INPROGRESS) {
		if (kvp_cl_now() >= end) {
			kvp_ucx.request_cancel(cl->worker, req);
			kvp_ucx.worker_progress(cl->worker);
			break;
		}
		kvp_ucx.worker_progress(cl->worker);
	}
	kvp_ucx.request_free(req);
}

/* Progress UCX; when nothing moved, sleep on its event fd (and ours) at
 * most wait_ms (and never past the next heartbeat). */
void
kvp_cl_progress(struct kvp_cl *cl, int wait_ms)
{
	struct pollfd pf[2];

	kvp_cl_beat(cl);
	if (kvp_ucx.worker_progress(cl->worker))
		return;
	if (wait_ms > (int)KVP_CL_BEAT_MS)
		wait_ms = (int)KVP_CL_BEAT_MS;
	if (wait_ms <= 0) {
		sched_yield();
		return;
	}
	if (kvp_ucx.worker_arm(cl->worker) != UCS_OK)
		return;
	pf[0].fd = cl->ucx_fd;
	pf[0].events = POLLIN;
	pf[1].fd = cl->evfd;
	pf[1].events = POLLIN;
	if (poll(pf, 2, wait_ms) > 0 && (pf[1].revents & POLLIN)) {
		uint64_t v;

		if (read(cl->evfd, &v, sizeof(v)) < 0) {
			/* EAGAIN: drained already */
		}
	}
}
