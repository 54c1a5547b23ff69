/* SPDX-License-Identifier: MIT */
/*
 * hostile_peer.c - a hostile member of a kvpool cluster, for the cluster
 * tests (tests/cluster/test_cluster.sh, "a hostile peer").  It reads the
 * victim's node entry from the directory (as any member can) and does
 * what a peer must not be able to do:
 *
 *   hostile_peer HOST PORT PWFILE VICTIM rma ADDR...
 *	one-sided UCX gets and puts (16 bytes, 0xee) at each address (hex)
 *	of the victim agent, with an rkey packed from our own memory (UCX
 *	over TCP checks none); each op is given 1 s.  Prints
 *	"rma tried=N got=G" (G: gets that returned the victim's bytes)
 *   hostile_peer HOST PORT PWFILE VICTIM forge NS PREFIX FROM N
 *	forged messages: DATA for no LEASE (eager and rendezvous), LEASEs
 *	with a wrong secret, from a name that is no member, of a wrong
 *	incarnation, truncated, unknown message ids; then a LEASE with the
 *	victim's secret in the name of a real member (the answer goes to
 *	that member, never to us).  Prints "forge sent=N data_in=D" (D:
 *	DATA messages we received: must be 0)
 *   hostile_peer HOST PORT PWFILE VICTIM stall NAME NS PREFIX FROM N SECS
 *	registers as member NAME (our address, the current wire format),
 *	LEASEs N keys, then stops reading (no UCX progress) for SECS
 *	seconds.  Prints "stall leased=N"
 *
 * Keys are cluster_node's: PREFIX-%08llu-0123...cdef.  Exit status 0
 * unless a step could not be set up.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <ucp/api/ucp.h>

/* the wire format of agent/cluster_int.h (protocol 2), written down again
 * here on purpose: the test is a peer, not a caller of the agent's code */
#define WIRE_MAGIC 0x32306c63706b766bull
#define AM_LEASE 21u
#define AM_DATA 22u
struct wire_hdr {
	uint64_t magic, req;
	uint8_t secret[16];
	char from[64];
	uint32_t n, bytes, lease_ms, inc;
};
struct wire_data {
	uint64_t magic, req;
	uint8_t secret[16];
	char from[64];
	uint32_t inc, idx;
	int32_t status;
	uint32_t crc;
	uint64_t len;
};

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static int efd; /* the worker's event fd */
static unsigned data_in;

static ucs_status_t
on_data(void *arg, const void *header, size_t hlen, void *data, size_t len,
	const ucp_am_recv_param_t *prm)
{
	(void)arg;
	(void)header;
	(void)hlen;
	(void)data;
	(void)len;
	(void)prm;
	data_in++;
	return UCS_OK;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* progress until req completes or 'secs' pass; its status (UCS_ERR_TIMED_OUT
 * if it did not complete: it is then cancelled) */
static ucs_status_t
wait_req(void *req, double secs)
{
	double end = now_s() + secs;
	ucs_status_t st;

	if (!req)
		return UCS_OK;
	if (UCS_PTR_IS_ERR(req))
		return UCS_PTR_STATUS(req);
	while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
		if (now_s() > end)
			return UCS_ERR_TIMED_OUT; /* left in flight: the
						   * process exits soon */
		ucp_worker_progress(worker);
	}
	ucp_request_free(req);
	return st;
}

/* Progress; when nothing moved, sleep on UCX's event fd (a message in
 * or a send able to go on wakes it) at most until 'end'. */
static void
idle_until(double end)
{
	struct pollfd pf;
	double left = end - now_s();

	if (ucp_worker_progress(worker) || left <= 0)
		return;
	if (ucp_worker_arm(worker) != UCS_OK)
		return; /* events pending: progress again */
	pf.fd = efd;
	pf.events = POLLIN;
	poll(&pf, 1, (int)(left * 1000) + 1);
}

static void
progress_for(double secs)
{
	double end = now_s() + secs;

	while (now_s() < end)
		idle_until(end);
}

static int
unhex(const char *s, unsigned char *out, size_t cap)
{
	size_t n = strlen(s), i;

	if (n % 2 || n / 2 > cap)
		return -1;
	for (i = 0; i < n / 2; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (unsigned char)v;
	}
	return (int)(n / 2);
}

static void
hex(const unsigned char *b, size_t n, char *out)
{
	size_t i;

	for (i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void
keyname(char *k, size_t cap, const char *prefix, unsigned long long i)
{
	snprintf(k, cap,
		 "%s-%08llu-0123456789abcdef0123456789abcdef0123456789abcdef",
		 prefix, i);
}

static size_t
lease_msg(unsigned char *m, const char *from, const uint8_t *secret,
	  uint32_t inc, const char *ns, const char *prefix,
	  unsigned long long first, uint32_t n)
{
	struct wire_hdr *h = (struct wire_hdr *)m;
	size_t at = sizeof(*h);
	uint32_t i;

	memset(h, 0, sizeof(*h));
	h->magic = WIRE_MAGIC;
	if (getrandom(&h->req, sizeof(h->req), 0) != sizeof(h->req))
		h->req = 77;
	memcpy(h->secret, secret, 16);
	snprintf(h->from, sizeof(h->from), "%s", from);
	h->n = n;
	h->inc = inc;
	m[at++] = (unsigned char)strlen(ns);
	memcpy(m + at, ns, strlen(ns));
	at += strlen(ns);
	for (i = 0; i < n; i++) {
		char k[128];

		keyname(k, sizeof(k), prefix, first + i);
		m[at++] = (unsigned char)strlen(k);
		memcpy(m + at, k, strlen(k));
		at += strlen(k);
	}
	h->bytes = (uint32_t)(at - sizeof(*h));
	return at;
}

static unsigned am_seq, am_only; /* HP_ONLY=N: send only message N */

static ucs_status_t
send_am(unsigned id, const void *hdr, size_t hlen, const void *buf, size_t len)
{
	ucp_request_param_t prm;

	if (am_only && ++am_seq != am_only)
		return UCS_OK;

	memset(&prm, 0, sizeof(prm));
	if (id == AM_LEASE) { /* as the agent sends them */
		prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		prm.flags = UCP_AM_SEND_FLAG_EAGER;
	}
	return wait_req(ucp_am_send_nbx(ep, id, hdr, hlen, buf, len, &prm),
			2.0);
}

int
main(int argc, char **argv)
{
	const char *host, *pwfile, *victim, *mode;
	char pw[256] = "", *vaddr = NULL;
	uint8_t vsecret[16];
	uint32_t vinc = 0;
	unsigned char *addr;
	redisContext *rc;
	redisReply *r;
	ucp_params_t up;
	ucp_worker_params_t wp;
	ucp_ep_params_t epp;
	ucp_am_handler_param_t hp;
	FILE *f;
	size_t k;
	int port, n;

	if (argc < 6) {
		fprintf(stderr, "usage: see tests/cluster/hostile_peer.c\n");
		return 2;
	}
	host = argv[1];
	port = atoi(argv[2]);
	if (getenv("HP_ONLY"))
		am_only = (unsigned)atoi(getenv("HP_ONLY"));
	pwfile = argv[3];
	victim = argv[4];
	mode = argv[5];
	f = fopen(pwfile, "r");
	if (f) {
		if (!fgets(pw, sizeof(pw), f))
			pw[0] = 0;
		fclose(f);
		pw[strcspn(pw, "\r\n")] = 0;
	}
	rc = redisConnect(host, port);
	if (!rc || rc->err)
		return 1;
	if (pw[0]) {
		r = redisCommand(rc, "AUTH %s", pw);
		if (!r || r->type == REDIS_REPLY_ERROR)
			return 1;
		freeReplyObject(r);
	}
	r = redisCommand(rc, "HGETALL kvpool:node:%s", victim);
	if (!r || r->type != REDIS_REPLY_ARRAY)
		return 1;
	for (k = 0; k + 1 < r->elements; k += 2) {
		const char *fl = r->element[k]->str,
			   *v = r->element[k + 1]->str;

		if (!strcmp(fl, "addr"))
			vaddr = strdup(v);
		else if (!strcmp(fl, "secret"))
			unhex(v, vsecret, sizeof(vsecret));
		else if (!strcmp(fl, "inc"))
			vinc = (uint32_t)strtoul(v, NULL, 10);
	}
	freeReplyObject(r);
	if (!vaddr) {
		fprintf(stderr, "no node entry for %s\n", victim);
		return 1;
	}
	addr = malloc(strlen(vaddr) / 2 + 1);
	if (!addr || unhex(vaddr, addr, strlen(vaddr) / 2) < 1)
		return 1;

	memset(&up, 0, sizeof(up));
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
	if (ucp_init(&up, NULL, &ctx) != UCS_OK)
		return 1;
	memset(&wp, 0, sizeof(wp));
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	if (ucp_worker_create(ctx, &wp, &worker) != UCS_OK ||
	    ucp_worker_get_efd(worker, &efd) != UCS_OK)
		return 1;
	memset(&hp, 0, sizeof(hp));
	hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
			UCP_AM_HANDLER_PARAM_FIELD_CB;
	hp.id = AM_DATA;
	hp.cb = on_data;
	ucp_worker_set_am_recv_handler(worker, &hp);
	memset(&epp, 0, sizeof(epp));
	epp.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
	epp.address = (const ucp_address_t *)addr;
	epp.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	if (ucp_ep_create(worker, &epp, &ep) != UCS_OK)
		return 1;
	progress_for(0.2);

	if (!strcmp(mode, "rma")) {
		/* the puts are flushed once at the end (a put completes
		 * locally when its bytes left us) */
		/* an rkey of our own memory: UCX over TCP checks none */
		static unsigned char mine[1 << 16];
		ucp_mem_map_params_t mp;
		ucp_mem_h mh;
		void *rkb;
		size_t rkl;
		ucp_rkey_h rkey = NULL;
		unsigned tried = 0, got = 0;
		int i;

		memset(&mp, 0, sizeof(mp));
		mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
				UCP_MEM_MAP_PARAM_FIELD_LENGTH;
		mp.address = mine;
		mp.length = sizeof(mine);
		if (ucp_mem_map(ctx, &mp, &mh) != UCS_OK ||
		    ucp_rkey_pack(ctx, mh, &rkb, &rkl) != UCS_OK)
			return 1;
		if (ucp_ep_rkey_unpack(ep, rkb, &rkey) != UCS_OK) {
			printf("rma: the victim's endpoint takes no rkey (no one-sided transport)\n");
			rkey = NULL;
		}
		for (i = 6; i < argc; i++) {
			uint64_t a = strtoull(argv[i], NULL, 16);
			unsigned char buf[16], ee[16];
			ucp_request_param_t prm;
			ucs_status_t sg = UCS_ERR_UNREACHABLE,
				     sp = UCS_ERR_UNREACHABLE;

			memset(buf, 0x5a, sizeof(buf));
			memset(ee, 0xee, sizeof(ee));
			memset(&prm, 0, sizeof(prm));
			tried++;
			if (rkey) {
				sg = wait_req(ucp_get_nbx(ep, buf, 16, a, rkey,
							  &prm),
					      0.3);
				sp = wait_req(ucp_put_nbx(ep, ee, 16, a, rkey,
							  &prm),
					      0.3);
			}
			/* a get "got" the victim's bytes if it completed and
			 * its buffer is no longer our fill */
			for (k = 0; k < 16; k++)
				if (buf[k] != 0x5a)
					break;
			if (sg == UCS_OK && k < 16)
				got++;
			printf("rma %#llx: get %s%s, put %s\n",
			       (unsigned long long)a, ucs_status_string(sg),
			       sg == UCS_OK && k < 16 ? " (BYTES READ)" : "",
			       ucs_status_string(sp));
		}
		if (rkey) {
			ucp_request_param_t prm;

			memset(&prm, 0, sizeof(prm));
			printf("rma flush: %s\n",
			       ucs_status_string(wait_req(
				       ucp_ep_flush_nbx(ep, &prm), 1.0)));
		}
		printf("rma tried=%u got=%u\n", tried, got);
		fflush(stdout);
		_exit(0);
	}
	if (!strcmp(mode, "forge") && argc >= 10) {
		const char *ns = argv[6], *prefix = argv[7];
		unsigned long long first = strtoull(argv[8], NULL, 10);
		uint32_t cnt = (uint32_t)strtoul(argv[9], NULL, 10);
		unsigned char *m = malloc(1 << 20), *big = calloc(1, 4 << 20);
		uint8_t bad[16];
		struct wire_data d;
		unsigned sent = 0, id;
		size_t len;

		if (!m || !big || cnt == 0 || cnt > 128)
			return 1;
		memcpy(bad, vsecret, 16);
		bad[0] ^= 1;
		/* DATA for no LEASE: eager, and a rendezvous of 4 MiB */
		memset(&d, 0, sizeof(d));
		d.magic = WIRE_MAGIC;
		d.req = 12345;
		d.inc = vinc;
		d.len = 16;
		snprintf(d.from, sizeof(d.from), "%s", victim);
		send_am(AM_DATA, &d, sizeof(d), big, 16), sent++;
		d.len = 4 << 20;
		send_am(AM_DATA, &d, sizeof(d), big, 4 << 20), sent++;
		send_am(AM_DATA, &d, 8, big, 64), sent++; /* short header */
		/* LEASEs: a wrong secret, a name no member has, a wrong
		 * incarnation, truncated, each for real keys */
		len = lease_msg(m, "node-evil", bad, vinc, ns, prefix, first,
				cnt);
		send_am(AM_LEASE, NULL, 0, m, len), sent++;
		len = lease_msg(m, "node-evil", vsecret, vinc, ns, prefix,
				first, cnt);
		send_am(AM_LEASE, NULL, 0, m, len), sent++;
		len = lease_msg(m, "node2", vsecret, vinc + 1, ns, prefix,
				first, cnt);
		send_am(AM_LEASE, NULL, 0, m, len), sent++;
		len = lease_msg(m, "node2", vsecret, vinc, ns, prefix, first,
				cnt);
		send_am(AM_LEASE, NULL, 0, m, len / 2), sent++;
		/* a LEASE as a real member (node2): valid, so the victim
		 * answers, to node2's registered address, never to us */
		send_am(AM_LEASE, NULL, 0, m, len), sent++;
		/* unknown ids, empty and garbage */
		for (id = 0; id < 32 + 4; id++) {
			static const unsigned far[4] = { 64, 1000, 40000,
							 65535 };
			unsigned x = id < 32 ? id : far[id - 32];

			if (x == AM_LEASE || x == AM_DATA)
				continue;
			send_am(x, NULL, 0, big, (x % 64) * 37), sent++;
		}
		progress_for(1.0);
		printf("forge sent=%u data_in=%u\n", sent, data_in);
		fflush(stdout);
		_exit(0);
	}
	if (!strcmp(mode, "stall") && argc >= 12) {
		const char *name = argv[6], *ns = argv[7], *prefix = argv[8];
		unsigned long long first = strtoull(argv[9], NULL, 10);
		uint32_t cnt = (uint32_t)strtoul(argv[10], NULL, 10), i;
		unsigned secs = (unsigned)strtoul(argv[11], NULL, 10);
		ucp_address_t *mya;
		size_t myl;
		char *myhex, sechex[33];
		uint8_t mysec[16];
		unsigned char *m = malloc(1 << 20);
		size_t len;
		double t, t2;

		if (!m || ucp_worker_get_address(worker, &mya, &myl) != UCS_OK)
			return 1;
		myhex = malloc(2 * myl + 1);
		if (!myhex ||
		    getrandom(mysec, sizeof(mysec), 0) != sizeof(mysec))
			return 1;
		hex((const unsigned char *)mya, myl, myhex);
		hex(mysec, 16, sechex);
		r = redisCommand(
			rc,
			"HSET kvpool:node:%s addr %s proto 2 secret %s pool x capacity 0 inc 1",
			name, myhex, sechex);
		if (r)
			freeReplyObject(r);
		r = redisCommand(rc, "PEXPIRE kvpool:node:%s 60000", name);
		if (r)
			freeReplyObject(r);
		r = redisCommand(rc, "SADD kvpool:members %s", name);
		if (r)
			freeReplyObject(r);
		/* LEASEs of 128 keys at most, sent again until the victim
		 * answers (it checks a new member's address before it
		 * connects to it); then no reading at all, with the rest of
		 * its answers in flight */
		for (t = now_s() + 20; !data_in && now_s() < t;) {
			for (i = 0; i < cnt; i += 128) {
				uint32_t c = cnt - i < 128 ? cnt - i : 128;

				len = lease_msg(m, name, vsecret, vinc, ns,
						prefix, first + i, c);
				send_am(AM_LEASE, NULL, 0, m, len);
			}
			for (t2 = now_s() + 0.5; !data_in && now_s() < t2;)
				idle_until(t2);
		}
		printf("stall leased=%u data_in=%u\n", cnt, data_in);
		fflush(stdout);
		/* no reading until the test ends us (SIGTERM), at most secs */
		{
			sigset_t term;
			struct timespec ts = { (time_t)secs, 0 };

			sigemptyset(&term);
			sigaddset(&term, SIGTERM);
			sigprocmask(SIG_BLOCK, &term, NULL);
			sigtimedwait(&term, NULL, &ts);
		}
		r = redisCommand(rc, "DEL kvpool:node:%s", name);
		if (r)
			freeReplyObject(r);
		r = redisCommand(rc, "SREM kvpool:members %s", name);
		if (r)
			freeReplyObject(r);
		return 0;
	}
	(void)n;
	fprintf(stderr, "unknown mode %s\n", mode);
	return 2;
}
