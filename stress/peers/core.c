/* SPDX-License-Identifier: MIT */
/*
 * core.c - bench_peers' core: the helpers every file uses, the JSON
 * lines on stdout, and the measurement itself.
 *
 * A measurement: the parent writes one command to each of its workers'
 * pipes; each worker opens the system's client (once), prepares what
 * the command needs and acknowledges; once every worker is ready the
 * parent stores the command's seq in the shared word go, and the
 * workers, spinning on it, start together.  Each worker times its own
 * loop; the parent takes the wall time from the first start to the last
 * finish.  No system's code is here: the workers call the drivers.
 */
#include <poll.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "stress/peers/peers_int.h"

struct kvpb_cfg kvpb_cfg;
struct kvpb_vset kvpb_vs[KVPB_NSETS];
struct kvpb_ctl *kvpb_ctl;
unsigned char *kvpb_ixkeys[KVPB_MAX_IX];
uint64_t kvpb_ixcap[KVPB_MAX_IX];

const struct kvpb_driver *const kvpb_drv[KVPB_NSYS] = {
	[SYS_MEMCPY] = &kvpb_drv_memcpy, [SYS_KVPOOL] = &kvpb_drv_kvpool,
	[SYS_LMDB] = &kvpb_drv_lmdb,     [SYS_REDIS] = &kvpb_drv_redis,
	[SYS_RPC] = &kvpb_drv_rpc,       [SYS_RPC1] = &kvpb_drv_rpc1,
};

static int kvpb_cmd_fd[KVPB_MAX_PROCS]; /* parent: write end per worker */
static pid_t kvpb_wpid[KVPB_MAX_PROCS];
static int kvpb_ack_rd = -1, kvpb_ack_wr = -1;

/* ---- helpers ---- */

bool
kvpb_sys_on(unsigned sys)
{
	return kvpb_cfg.sys_mask & (1u << sys);
}

/* Is d's store needed: is d, or a system that shares it, selected? */
bool
kvpb_store_on(const struct kvpb_driver *d)
{
	unsigned sys;

	for (sys = 0; sys < KVPB_NSYS; sys++)
		if (kvpb_sys_on(sys) &&
		    (kvpb_drv[sys] == d || kvpb_drv[sys]->shares == d))
			return true;
	return false;
}

/* Is a physical limit (memcpy) selected?  It also runs on every CPU. */
bool
kvpb_limit_on(void)
{
	unsigned sys;

	for (sys = 0; sys < KVPB_NSYS; sys++)
		if (kvpb_sys_on(sys) && kvpb_drv[sys]->limit)
			return true;
	return false;
}

bool
kvpb_sec_on(unsigned sec)
{
	return kvpb_cfg.sec_mask & (1u << sec);
}

/* The largest value any section stores. */
uint64_t
kvpb_max_value(void)
{
	uint64_t m = kvpb_cfg.sizes[kvpb_cfg.nsizes - 1];

	return m > KVPB_RTT_SIZE ? m : KVPB_RTT_SIZE;
}

void
kvpb_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
}

int
kvpb_read_full(int fd, void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EPIPE;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int
kvpb_write_full(int fd, const void *buf, size_t n)
{
	const unsigned char *p = buf;

	while (n) {
		ssize_t r = write(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EPIPE;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Close every descriptor above 2 but keep (a server child's own). */
void
kvpb_close_fds_but(int keep)
{
	int fd;

	for (fd = 3; fd < 4096; fd++)
		if (fd != keep)
			close(fd);
}

const char *
kvpb_size_name(uint64_t size, char *buf, size_t cap)
{
	if (size >= (1u << 20) && size % (1u << 20) == 0)
		snprintf(buf, cap, "%lluMiB", (unsigned long long)(size >> 20));
	else if (size >= 1024 && size % 1024 == 0)
		snprintf(buf, cap, "%lluKiB", (unsigned long long)(size >> 10));
	else
		snprintf(buf, cap, "%lluB", (unsigned long long)size);
	return buf;
}

static inline void
kvpb_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ volatile("" ::: "memory");
#endif
}

static void
kvpb_pin(unsigned cpu)
{
	cpu_set_t set;

	if (!kvpb_cfg.pin)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu % kvpb_cfg.nproc, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		kvpb_log("bench_peers: cannot pin to CPU %u: %s\n",
			 cpu % kvpb_cfg.nproc, strerror(errno));
}

/* ---- the JSON lines (stress/bench_report.py reads them) ---- */

/* The first line: the run's configuration. */
void
kvpb_emit_config(void)
{
	const struct kvpb_cfg *c = &kvpb_cfg;
	unsigned k, n;

	printf("{\"config\": {\"mode\": \"%s\", \"rounds\": %u, \"ws_bytes\": %llu, "
	       "\"passes\": %u, \"nproc\": %u, \"pinned\": %s, \"ssd_dir\": \"%s\", "
	       "\"ssd_bytes\": %llu, \"prefix_batches\": %u, \"rtt_ops\": %llu, "
	       "\"rtt_size\": %u, \"rtt_keys\": %u, \"sizes\": [",
	       c->quick ? "quick" : "full", c->rounds,
	       (unsigned long long)c->ws, c->passes, c->nproc,
	       c->pin ? "true" : "false", c->ssd_dir,
	       (unsigned long long)c->ssd_bytes, c->prefix_batches,
	       (unsigned long long)c->rtt_ops, KVPB_RTT_SIZE, KVPB_RTT_KEYS);
	for (k = 0; k < c->nsizes; k++)
		printf("%s%llu", k ? ", " : "",
		       (unsigned long long)c->sizes[k]);
	printf("], \"procs\": [");
	for (k = 0; k < c->nprocs; k++)
		printf("%s%u", k ? ", " : "", c->procs[k]);
	printf("], \"systems\": [");
	for (k = 0, n = 0; k < KVPB_NSYS; k++)
		if (kvpb_sys_on(k))
			printf("%s\"%s\"", n++ ? ", " : "", kvpb_drv[k]->name);
	printf("]}}\n");
	fflush(stdout);
}

/*
 * One JSON object per measurement: where it belongs (round, section,
 * system, size, procs, batch), then name/value pairs (NULL-terminated
 * list of const char *, double), then how many operations failed.
 */
void
kvpb_emit(unsigned round, const char *sec, const char *sys, uint64_t size,
	  unsigned procs, unsigned batch, uint64_t bad, ...)
{
	const char *name;
	va_list ap;
	int k = 0;

	printf("{\"round\": %u, \"section\": \"%s\", \"system\": \"%s\", \"size\": %llu, "
	       "\"procs\": %u, \"batch\": %u, \"bad\": %llu, \"v\": {",
	       round, sec, sys, (unsigned long long)size, procs, batch,
	       (unsigned long long)bad);
	va_start(ap, bad);
	while ((name = va_arg(ap, const char *)) != NULL) {
		double v = va_arg(ap, double);

		printf("%s\"%s\": %.6g", k++ ? ", " : "", name, v);
	}
	va_end(ap);
	printf("}}\n");
	fflush(stdout);
}

/* A fact about the run (a fill's time, an index set's load): a JSON
 * line, and the same on stderr. */
void
kvpb_info(const char *name, const char *fmt, ...)
{
	char v[512];
	const char *p;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(v, sizeof(v), fmt, ap);
	va_end(ap);
	printf("{\"info\": \"%s\", \"value\": \"", name);
	for (p = v; *p; p++)
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if ((unsigned char)*p >= 0x20)
			putchar(*p);
	printf("\"}\n");
	fflush(stdout);
	kvpb_log("  %s: %s\n", name, v);
}

/* ---- the workload ---- */

static uint64_t
kvpb_mix_tag(unsigned round, unsigned w, unsigned s)
{
	return KVPB_TAG_MIX +
	       ((uint64_t)round * KVPB_MAX_PROCS + w) * KVPB_MAX_SIZES + s;
}

/* Key k of those worker w puts in the mixed measurement cmd. */
void
kvpb_mixed_key(unsigned char *key, const struct kvpb_cmd *cmd, unsigned w,
	       uint64_t k)
{
	kvpb_key(key, kvpb_mix_tag(cmd->round, w, cmd->s), k);
}

/* How many puts a worker makes in one mixed measurement (also the
 * parent's count of keys to delete afterwards). */
uint64_t
kvpb_mixed_puts(const struct kvpb_vset *v, uint64_t iters)
{
	unsigned hb = v->batch / 2 ? v->batch / 2 : 1;

	return (iters + 2 * hb - 1) / (2 * hb) * hb;
}

static int
kvpb_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* ---- the workers ---- */

/* One batch of gets through d; verifies the first value if check. */
static uint64_t
kvpb_w_get(struct kvpb_worker *W, const struct kvpb_driver *d,
	   const struct kvpb_vset *v, const uint64_t *idx, unsigned m,
	   bool check)
{
	const unsigned char *first = W->dst;
	uint64_t bad = d->get(W, v, idx, m, &first);

	kvpb_clobber(W->dst);
	if (check && !bad &&
	    !kvpt_check(first, v->size, v->keys + idx[0] * KVPB_KLEN, KVPB_KLEN,
			1))
		bad++;
	return bad;
}

/* Everything a command needs before the start: the system's client,
 * the mixed section's new keys, the rtt section's sample array. */
static int
kvpb_w_prepare(struct kvpb_worker *W, const struct kvpb_driver *d,
	       const struct kvpb_cmd *cmd, uint64_t nput)
{
	unsigned pool = cmd->sec == SEC_PREFIX || cmd->sec == SEC_EXISTS ?
				1 + cmd->s :
				0;
	int rc = d->open ? d->open(W, pool) : 0;
	uint64_t k;

	if (rc) {
		kvpb_log("bench_peers: worker %u: cannot open %s: %d\n", W->w,
			 d->name, rc);
		return rc;
	}
	if (cmd->sec == SEC_MIXED) {
		if (nput * KVPB_KLEN > W->pkeys_cap) {
			free(W->pkeys);
			W->pkeys_cap = nput * KVPB_KLEN;
			W->pkeys = malloc(W->pkeys_cap);
			if (!W->pkeys)
				return -ENOMEM;
		}
		for (k = 0; k < nput; k++)
			kvpb_mixed_key(W->pkeys + k * KVPB_KLEN, cmd, W->w, k);
	}
	if (d->prepare) {
		rc = d->prepare(W, cmd);
		if (rc)
			return rc;
	}
	if (cmd->sec == SEC_RTT && cmd->iters > W->lat_cap) {
		free(W->lat);
		W->lat_cap = cmd->iters;
		W->lat = malloc(W->lat_cap * sizeof(*W->lat));
		if (!W->lat) {
			W->lat_cap = 0;
			return -ENOMEM;
		}
	}
	return 0;
}

static int
kvpb_w_run(struct kvpb_worker *W, const struct kvpb_cmd *cmd)
{
	const struct kvpb_driver *d = kvpb_drv[cmd->sys];
	struct kvpb_wres *res = &kvpb_ctl->res[W->w];
	const struct kvpb_vset *v = cmd->sec <= SEC_MIXED ||
						    cmd->sec == SEC_RTT ?
					    &kvpb_vs[cmd->s] :
					    NULL;
	uint64_t idx[KVPB_MAX_CALL], j = 0, done = 0, bad = 0, nput = 0,
				     bytes = 0;
	uint64_t sum = 0, worst = 0;
	unsigned ix = cmd->s;
	char ack = 1;
	int rc;

	memset(res, 0, sizeof(*res));
	if (v)
		j = W->w * v->n / cmd->procs; /* workers start apart */
	if (cmd->sec == SEC_MIXED)
		nput = kvpb_mixed_puts(v, cmd->iters);
	rc = kvpb_w_prepare(W, d, cmd, nput);
	/* ready; then wait for the start */
	if (kvpb_write_full(kvpb_ack_wr, &ack, 1))
		return -EPIPE;
	/* acquire: pairs with the parent's release of go in kvpb_measure;
	 * spinning is brief (the parent stores go once every worker is
	 * ready), and yields every 1,024 polls: the parent may be waiting
	 * for this very CPU */
	{
		unsigned spins = 0;

		while (kvp_load_acquire(&kvpb_ctl->go) != cmd->seq)
			if (++spins % 1024)
				kvpb_cpu_relax();
			else
				sched_yield();
	}
	res->t0 = kvpb_now_ns();
	if (rc) {
		bad = 1;
	} else if (cmd->sec == SEC_GET) {
		while (done < cmd->iters) {
			unsigned m = v->batch, k;

			for (k = 0; k < m; k++) {
				idx[k] = j;
				if (++j == v->n)
					j = 0;
			}
			bad += kvpb_w_get(W, d, v, idx, m, cmd->round == 0);
			done += m;
		}
		bytes = done * v->size;
	} else if (cmd->sec == SEC_MIXED) {
		unsigned hb = v->batch / 2 ? v->batch / 2 : 1;
		uint64_t p = 0;

		while (p < nput) {
			unsigned k;

			for (k = 0; k < hb; k++) {
				idx[k] = j;
				if (++j == v->n)
					j = 0;
			}
			bad += kvpb_w_get(W, d, v, idx, hb, cmd->round == 0);
			bad += d->put(W, W->pkeys + p * KVPB_KLEN, hb, v->size,
				      p);
			p += hb;
			done += 2 * hb;
		}
		bytes = done * v->size;
	} else if (cmd->sec == SEC_PREFIX && d->prefix) {
		uint64_t nb = kvpb_ctl->ix_n[ix] / KVPB_PREFIX, b, it;

		for (it = 0; nb && it < cmd->iters; it++) {
			uint64_t t0, t;

			b = it % nb;
			t0 = kvpb_now_ns();
			bad += d->prefix(W, ix,
					 kvpb_ixkeys[ix] +
						 b * KVPB_PREFIX * KVPB_KLEN,
					 b * KVPB_PREFIX) != KVPB_PREFIX;
			t = kvpb_now_ns() - t0;
			sum += t;
			worst = t > worst ? t : worst;
			done += KVPB_PREFIX;
		}
	} else if (cmd->sec == SEC_RTT) {
		/* every call timed alone: the clock reads (tens of ns) are
		 * inside each sample, the same for every system */
		for (done = 0; done < cmd->iters; done++) {
			uint64_t t0, t;

			idx[0] = j;
			if (++j == v->n)
				j = 0;
			t0 = kvpb_now_ns();
			bad += kvpb_w_get(W, d, v, idx, 1, cmd->round == 0);
			t = kvpb_now_ns() - t0;
			W->lat[done] = t;
			sum += t;
			worst = t > worst ? t : worst;
		}
		bytes = done * v->size;
	} else if (cmd->sec == SEC_EXISTS && d->exists) {
		uint64_t n = kvpb_ctl->ix_n[ix];

		for (done = 0; n && done < cmd->iters; done++) {
			bad += !d->exists(ix, kvpb_ixkeys[ix] + j * KVPB_KLEN);
			if (++j == n)
				j = 0;
		}
	}
	res->t1 = kvpb_now_ns();
	if (cmd->sec == SEC_RTT && done) {
		qsort(W->lat, done, sizeof(*W->lat), kvpb_cmp_u64);
		res->p50_ns = W->lat[done / 2];
		res->p99_ns = W->lat[done * 99 / 100];
	}
	res->ops = done;
	res->bytes = bytes;
	res->bad = bad;
	res->sum_ns = sum;
	res->worst_ns = worst;
	return kvpb_write_full(kvpb_ack_wr, &ack, 1);
}

static void __attribute__((noreturn)) kvpb_worker_main(unsigned w, int cmd_fd)
{
	const struct kvpb_cfg *c = &kvpb_cfg;
	struct kvpb_worker W;
	struct kvpb_cmd cmd;
	unsigned s;

	memset(&W, 0, sizeof(W));
	W.w = w;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	kvpb_pin(w);
	W.maxbb = KVPB_RTT_SIZE;
	for (s = 0; s < c->nsizes; s++)
		if (kvpb_vs[s].batch * kvpb_vs[s].size > W.maxbb)
			W.maxbb = kvpb_vs[s].batch * kvpb_vs[s].size;
	W.dst = kvpb_alloc(W.maxbb);
	W.src = kvpb_alloc(c->sizes[c->nsizes - 1]);
	if (!W.dst || !W.src)
		_exit(3);
	/* the put source: the smallest value size repeated (a fixed page) */
	for (s = 0; s + c->sizes[0] <= c->sizes[c->nsizes - 1];
	     s += (unsigned)c->sizes[0])
		kvpt_fill(W.src + s, c->sizes[0], "put", 3, 1);
	while (kvpb_read_full(cmd_fd, &cmd, sizeof(cmd)) == 0 &&
	       cmd.op == CMD_RUN)
		if (kvpb_w_run(&W, &cmd))
			break;
	/* close the clients (had the worker died instead, the pool's
	 * reaper would free its slot) */
	for (s = 0; s < KVPB_NSYS; s++)
		if (kvpb_drv[s]->close)
			kvpb_drv[s]->close();
	_exit(0);
}

int
kvpb_workers_start(void)
{
	int ack[2];
	unsigned w;

	if (pipe2(ack, O_CLOEXEC))
		return -errno;
	kvpb_ack_rd = ack[0];
	kvpb_ack_wr = ack[1];
	for (w = 0; w < kvpb_cfg.nworkers; w++) {
		int p[2];

		if (pipe2(p, O_CLOEXEC))
			return -errno;
		kvpb_wpid[w] = fork();
		if (kvpb_wpid[w] < 0)
			return -errno;
		if (kvpb_wpid[w] == 0) {
			unsigned k;

			close(p[1]);
			close(kvpb_ack_rd);
			for (k = 0; k < w; k++)
				close(kvpb_cmd_fd[k]);
			kvpb_worker_main(w, p[0]);
		}
		close(p[0]);
		kvpb_cmd_fd[w] = p[1];
	}
	close(kvpb_ack_wr);
	kvpb_ack_wr = -1;
	return 0;
}

void
kvpb_workers_stop(void)
{
	struct kvpb_cmd cmd = { .op = CMD_EXIT };
	unsigned w;

	for (w = 0; w < kvpb_cfg.nworkers; w++) {
		if (kvpb_wpid[w] <= 0)
			continue;
		if (kvpb_write_full(kvpb_cmd_fd[w], &cmd, sizeof(cmd)))
			kill(kvpb_wpid[w], SIGKILL);
		close(kvpb_cmd_fd[w]);
	}
	for (w = 0; w < kvpb_cfg.nworkers; w++)
		if (kvpb_wpid[w] > 0)
			waitpid(kvpb_wpid[w], NULL, 0);
}

/* Read n acknowledgements; -ETIMEDOUT after 10 minutes (a dead worker). */
static int
kvpb_acks(unsigned n)
{
	char buf[KVPB_MAX_PROCS];
	unsigned got = 0;

	while (got < n) {
		struct pollfd pf = { kvpb_ack_rd, POLLIN, 0 };
		ssize_t r;

		if (poll(&pf, 1, 600000) <= 0)
			return -ETIMEDOUT;
		r = read(kvpb_ack_rd, buf, n - got);
		if (r <= 0)
			return -EPIPE;
		got += (unsigned)r;
	}
	return 0;
}

/* Run one command on workers 0..procs-1, started together, and fill
 * the aggregate. */
int
kvpb_measure(struct kvpb_cmd *cmd, struct kvpb_agg *a)
{
	static uint64_t seq;
	uint64_t t0 = UINT64_MAX, t1 = 0;
	unsigned w;
	int rc;

	cmd->op = CMD_RUN;
	cmd->seq = ++seq;
	for (w = 0; w < cmd->procs; w++)
		if (kvpb_write_full(kvpb_cmd_fd[w], cmd, sizeof(*cmd)))
			return -EPIPE;
	rc = kvpb_acks(cmd->procs);
	if (rc)
		return rc;
	/* release: pairs with the workers' acquire loads of go in
	 * kvpb_w_run; they see the new seq and start */
	kvp_store_release(&kvpb_ctl->go, cmd->seq);
	rc = kvpb_acks(cmd->procs);
	if (rc)
		return rc;
	memset(a, 0, sizeof(*a));
	for (w = 0; w < cmd->procs; w++) {
		const struct kvpb_wres *r = &kvpb_ctl->res[w];

		t0 = r->t0 < t0 ? r->t0 : t0;
		t1 = r->t1 > t1 ? r->t1 : t1;
		a->busy_s += (double)(r->t1 - r->t0) / 1e9;
		a->ops += r->ops;
		a->bytes += r->bytes;
		a->bad += r->bad;
		a->sum_ns += (double)r->sum_ns;
		a->worst_ns = (double)r->worst_ns > a->worst_ns ?
				      (double)r->worst_ns :
				      a->worst_ns;
		/* rtt runs on one worker; with more, the slowest one's */
		a->p50_ns = (double)r->p50_ns > a->p50_ns ? (double)r->p50_ns :
							    a->p50_ns;
		a->p99_ns = (double)r->p99_ns > a->p99_ns ? (double)r->p99_ns :
							    a->p99_ns;
	}
	a->wall_s = (double)(t1 - t0) / 1e9;
	return 0;
}
