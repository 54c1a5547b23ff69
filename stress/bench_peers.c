/* SPDX-License-Identifier: MIT */
/*
 * bench_peers.c - kvpool against the physical limits and against the
 * systems a user would otherwise pick, on the same machine, with the same
 * keys and values, in the same rounds.
 *
 * A benchmark, not a test: it asserts nothing about the numbers.  It
 * prints one JSON object per measurement on stdout (stress/bench turns
 * them into medians, ratios, tables and plots) and its progress on
 * stderr.
 *
 * Systems, each behind the same small driver (get a batch, put a batch,
 * probe a 2,000-key prefix):
 *   memcpy   the limit: values in a /dev/shm (tmpfs, MAP_SHARED) region,
 *            the same kind of memory as kvpool's arena, copied into the
 *            worker's private buffer.  With as many workers as CPUs it
 *            is the all-core limit.
 *   kvpool   kvp_get / kvp_batch_get (DRAM hits) into the same private
 *            buffer; kvp_put; kvp_batch_exists_prefix.
 *   lmdb     one environment on /dev/shm, MDB_NOSYNC | MDB_WRITEMAP, the
 *            main DB; a read transaction per batch (reset/renew, LMDB's
 *            fast path), each value copied out of the map into the
 *            private buffer; a write transaction per batch of puts with
 *            MDB_RESERVE (one copy).
 *   redis    a private redis-server on a Unix socket, no persistence;
 *            hiredis, batches pipelined; a value is copied from hiredis'
 *            reply into the private buffer (hiredis cannot read into a
 *            caller's buffer).
 *   rpc      the shape of the existing KV-cache pools: a server process
 *            owns the DRAM tier (a hash table of malloc'd values under a
 *            rwlock, a thread per connection) and serves a batch of gets
 *            over AF_UNIX by copying each value into the worker's
 *            registered buffer (a memfd sent once with SCM_RIGHTS); puts
 *            are copied out of that buffer.  One request and one reply
 *            per batch (N keys per request: the batch size below).
 *   rpc1     the same server, protocol and connection, but one request
 *            and one reply per key: the shape of engines that call
 *            get(key) per page, so every value pays a whole round trip.
 *            Not run in the prefix section (that would be 2,000 round
 *            trips per batch; the rtt section gives the cost of one).
 *
 * Workloads (sizes and process counts from the command line):
 *   get      pure hits over a working set larger than the L3 cache, in
 *            batches (auto: 1 MiB per batch, at most 16 keys);
 *   mixed    50/50: a batch of gets of present keys, then a batch of puts
 *            of new keys (deleted again after the measurement, untimed);
 *   prefix   2,000-key kvp_batch_exists_prefix (and the equivalent for
 *            each peer: one LMDB read txn, 2,000 pipelined EXISTS, one
 *            RPC) on an index filled to 90% of kvpool's slots; plus
 *            kvpool's single kvp_exists rate;
 *   ssd      fio --direct=1 --ioengine=io_uring sequential write and read
 *            of the same block size on the same file system as
 *            --ssd-dir, against kvpool's demotion rate and its cold
 *            (O_DIRECT, through the staging arena) batch gets; and a
 *            2,000-key batch of 64 KiB SSD values through an 8-slot
 *            staging arena against bytes / fio's 64 KiB read bandwidth;
 *   rtt      the latency of a 1-key get of a 4 KiB value (one worker,
 *            each call timed alone, the median and the 99th percentile
 *            over many calls, keys cycled over a 16 MiB set): kvp_get
 *            (the copy is small, so this is kvpool's own overhead), one
 *            rpc1 round trip, and memcpy of the same 4 KiB (the copy).
 *
 * Method.  Worker processes are forked once, at start, each pinned to
 * one CPU (worker w on CPU w mod nproc, like taskset -c); they open every
 * system's client once and stay, like an engine's workers.  Servers
 * (kvpoold, redis-server, the RPC server) are not pinned: they run where
 * the scheduler puts them, which with one worker gives them a core of
 * their own.  Every round measures every system, rotating the order;
 * round 0 is a warm-up (first touches, lazily mapped pages) and is not
 * printed.  Each measurement starts all its workers together (they spin
 * on a shared word) and takes the wall time from the first start to the
 * last finish.  GB/s are 10^9 bytes/s.
 *
 * usage: bench_peers [--quick] [--rounds N] [--sizes 64K,1M,4M]
 *        [--procs 1,2] [--systems memcpy,kvpool,lmdb,redis,rpc,rpc1]
 *        [--sections get,mixed,prefix,ssd,rtt] [--ws SIZE] [--batch N]
 *        [--ssd-dir DIR] [--no-pin]
 */
#include <getopt.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>
#include <lmdb.h>

#include "stress/bench_util.h"

#define KVPB_MAX_SIZES 4u
#define KVPB_MAX_PROCS 64u
#define KVPB_MAX_IX 2u
#define KVPB_PREFIX 2000u
#define KVPB_RPC_KMAX 96u
#define KVPB_RPC_MAXN 4096u
#define KVPB_RTT KVPB_MAX_SIZES /* the rtt value set's index in kvpb_vs */
#define KVPB_RTT_SIZE 4096u
#define KVPB_RTT_KEYS 4096u     /* 16 MiB of values */

#define KVPB_TAG_GET 0x676574ull
#define KVPB_TAG_IX 0x6978ull
#define KVPB_TAG_MIX (0x6d6978ull << 32)

enum { SYS_MEMCPY, SYS_KVPOOL, SYS_LMDB, SYS_REDIS, SYS_RPC, SYS_RPC1, KVPB_NSYS };
static const char *const kvpb_sys_name[KVPB_NSYS] = {
	"memcpy", "kvpool", "lmdb", "redis", "rpc", "rpc1",
};

enum { SEC_GET, SEC_MIXED, SEC_PREFIX, SEC_EXISTS, SEC_SSD, SEC_RTT, KVPB_NSEC };
static const char *const kvpb_sec_name[KVPB_NSEC] = {
	"get", "mixed", "prefix", "exists", "ssd", "rtt",
};

struct kvpb_cfg {
	bool quick, pin;
	unsigned rounds;
	unsigned nsizes;
	uint64_t sizes[KVPB_MAX_SIZES];
	unsigned nprocs;
	unsigned procs[8];
	unsigned sys_mask, sec_mask;
	uint64_t ws;            /* bytes of values per size */
	unsigned passes;        /* passes over the working set per get */
	unsigned batch;         /* keys per batch; 0 = auto */
	unsigned nix;
	uint64_t ix_entries[KVPB_MAX_IX];
	unsigned prefix_batches; /* 2,000-key batches per system and round */
	uint64_t exists_ops;
	uint64_t rtt_ops;       /* timed 1-key gets per system and round */
	char ssd_dir[512];
	unsigned nssd;
	uint64_t ssd_sizes[KVPB_MAX_SIZES];
	uint64_t ssd_bytes;     /* per SSD size and round */
	unsigned nproc;         /* online CPUs */
	unsigned nworkers;
};

static struct kvpb_cfg cfg;

/* One value set per size: the same keys and values in every system. */
struct kvpb_vset {
	uint64_t size, n;
	unsigned batch;
	unsigned char *keys; /* n keys of KVPB_KLEN bytes */
	unsigned char *mc;   /* the memcpy baseline's copy (tmpfs) */
};

static struct kvpb_vset kvpb_vs[KVPB_MAX_SIZES + 1]; /* + the rtt set */

/*
 * Shared with the workers (MAP_SHARED | MAP_ANONYMOUS, made before the
 * fork).  Commands and acknowledgements go through pipes; their write
 * and read order every plain field below (a pipe write happens before
 * the read that returns its bytes).
 */
struct kvpb_wres {
	uint64_t t0, t1, ops, bytes, bad, busy_ns, sum_ns, worst_ns;
	uint64_t p50_ns, p99_ns; /* rtt: of the single calls */
};

struct kvpb_ctl {
	kvp_aword_t go; /* the seq of the command whose workers may start */
	uint64_t pad[7];
	struct kvpb_wres res[KVPB_MAX_PROCS];
	char pool[1 + KVPB_MAX_IX][64]; /* kvpool pools: values, index sets */
	char lmdb_dir[256];
	char redis_sock[108];
	char rpc_sock[108];
	uint64_t lmdb_mapsize;
	uint64_t ix_n[KVPB_MAX_IX];     /* present keys of each index set */
	uint64_t ix_slots[KVPB_MAX_IX];
};

static struct kvpb_ctl *ctl;
static unsigned char *kvpb_ixkeys[KVPB_MAX_IX]; /* shared: filled after fork */
static uint64_t kvpb_ixcap[KVPB_MAX_IX];

struct kvpb_cmd {
	uint32_t op; /* CMD_* */
	uint32_t sec, sys, s, procs, round;
	uint64_t seq, iters;
};

enum { CMD_RUN = 1, CMD_EXIT };

static int kvpb_cmd_fd[KVPB_MAX_PROCS]; /* parent: write end per worker */
static pid_t kvpb_wpid[KVPB_MAX_PROCS];
static int kvpb_ack_rd = -1, kvpb_ack_wr = -1;

/* ---- small helpers ---- */

static bool
kvpb_sys_on(unsigned sys)
{
	return cfg.sys_mask & (1u << sys);
}

/* Is the RPC server needed?  rpc and rpc1 share it (and its contents). */
static bool
kvpb_rpc_on(void)
{
	return kvpb_sys_on(SYS_RPC) || kvpb_sys_on(SYS_RPC1);
}

static bool
kvpb_sec_on(unsigned sec)
{
	return cfg.sec_mask & (1u << sec);
}

/* The largest value any section stores (the parent's RPC put half). */
static uint64_t
kvpb_prpc_half(void)
{
	uint64_t m = cfg.sizes[cfg.nsizes - 1];

	return m > KVPB_RTT_SIZE ? m : KVPB_RTT_SIZE;
}

static void kvpb_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
kvpb_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
}

static void *
kvpb_unconst(const void *p)
{
	return (void *)(uintptr_t)p; /* LMDB's MDB_val is not const */
}

static int
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

static int
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

/*
 * Read one RPC message (a struct kvpb_rpc_hdr, then rh_n items of unit
 * bytes) into msg.  It reads as much as the socket holds, so a message
 * that arrived whole takes one read; the peer never sends the next
 * message before it has the answer to this one, so nothing is over-read.
 * 0, -EPIPE (hung up) or -EPROTO.
 */
static int
kvpb_read_msg(int fd, void *msg, size_t cap, size_t unit)
{
	unsigned char *p = msg;
	size_t got = 0, want = 8;

	while (got < want) {
		ssize_t r = read(fd, p + got, cap - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EPIPE;
		got += (size_t)r;
		if (got >= 8) {
			uint32_t n;

			memcpy(&n, p, sizeof(n));
			want = 8 + (size_t)n * unit;
			if (want > cap)
				return -EPROTO;
		}
	}
	return got == want ? 0 : -EPROTO;
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

/* Close every descriptor above 2 but keep (a server child's own). */
static void
kvpb_close_fds_but(int keep)
{
	int fd;

	for (fd = 3; fd < 4096; fd++)
		if (fd != keep)
			close(fd);
}

static void
kvpb_pin(unsigned cpu)
{
	cpu_set_t set;

	if (!cfg.pin)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu % cfg.nproc, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		kvpb_log("bench_peers: cannot pin to CPU %u: %s\n", cpu % cfg.nproc,
			 strerror(errno));
}

static const char *
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

/*
 * One JSON object per measurement: where it belongs (round, section,
 * system, size, procs, batch), then name/value pairs (NULL-terminated
 * list of const char *, double), then how many operations failed.
 */
static void
kvpb_emit(unsigned round, const char *sec, const char *sys, uint64_t size,
	  unsigned procs, unsigned batch, uint64_t bad, ...)
{
	const char *name;
	va_list ap;
	int k = 0;

	printf("{\"round\": %u, \"section\": \"%s\", \"system\": \"%s\", \"size\": %llu, "
	       "\"procs\": %u, \"batch\": %u, \"bad\": %llu, \"v\": {", round, sec, sys,
	       (unsigned long long)size, procs, batch, (unsigned long long)bad);
	va_start(ap, bad);
	while ((name = va_arg(ap, const char *)) != NULL) {
		double v = va_arg(ap, double);

		printf("%s\"%s\": %.6g", k++ ? ", " : "", name, v);
	}
	va_end(ap);
	printf("}}\n");
	fflush(stdout);
}

static void
kvpb_info(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
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

/* ==== the RPC shape: protocol ==== */

enum { RPC_GET = 1, RPC_PUT, RPC_DEL, RPC_EXISTS };

struct kvpb_rpc_op {
	uint8_t ro_op;
	uint8_t ro_klen;
	uint16_t ro_pad0;
	uint32_t ro_pad1;
	uint64_t ro_off; /* in the registered buffer */
	uint64_t ro_len;
	unsigned char ro_key[KVPB_RPC_KMAX];
};

/* A request is a header and rh_n ops of one kind; a reply is a header
 * (rh_prefix: RPC_EXISTS's answer) and rh_n int64 statuses (value
 * length or -errno; none for RPC_EXISTS). */
struct kvpb_rpc_hdr {
	uint32_t rh_n;
	uint32_t rh_prefix;
};

_Static_assert(sizeof(struct kvpb_rpc_op) == 120, "rpc op layout");

/* ==== the RPC shape: server ==== */

struct kvpb_rnode {
	struct kvpb_rnode *next;
	uint64_t hash, len;
	unsigned char *val;
	uint32_t klen;
	unsigned char key[KVPB_RPC_KMAX];
};

static struct {
	pthread_rwlock_t lock; /* a get holds it shared while it copies */
	struct kvpb_rnode **b;
	uint64_t mask;
} kvpb_rt;

static struct kvpb_rnode **
kvpb_rt_find_locked(uint64_t h, const unsigned char *key, uint32_t klen)
{
	struct kvpb_rnode **pp = &kvpb_rt.b[h & kvpb_rt.mask];

	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->hash == h && (*pp)->klen == klen && !memcmp((*pp)->key, key, klen))
			return pp;
	return pp;
}

static int64_t
kvpb_rt_op(const struct kvpb_rpc_op *op, unsigned char *buf, uint64_t bufsz)
{
	uint64_t h = kvp_hash(7, op->ro_key, op->ro_klen);
	struct kvpb_rnode **pp, *n;
	int64_t st;

	if (op->ro_klen == 0 || op->ro_klen > KVPB_RPC_KMAX || op->ro_off > bufsz ||
	    op->ro_len > bufsz - op->ro_off)
		return -EINVAL;
	switch (op->ro_op) {
	case RPC_GET:
		pthread_rwlock_rdlock(&kvpb_rt.lock);
		n = *kvpb_rt_find_locked(h, op->ro_key, op->ro_klen);
		if (!n)
			st = -ENOENT;
		else if (n->len > op->ro_len)
			st = -EMSGSIZE;
		else {
			memcpy(buf + op->ro_off, n->val, n->len);
			st = (int64_t)n->len;
		}
		pthread_rwlock_unlock(&kvpb_rt.lock);
		return st;
	case RPC_PUT:
		n = malloc(sizeof(*n));
		if (!n)
			return -ENOMEM;
		n->val = malloc(op->ro_len ? op->ro_len : 1);
		if (!n->val) {
			free(n);
			return -ENOMEM;
		}
		memcpy(n->val, buf + op->ro_off, op->ro_len); /* outside the lock */
		n->len = op->ro_len;
		n->hash = h;
		n->klen = op->ro_klen;
		memcpy(n->key, op->ro_key, op->ro_klen);
		pthread_rwlock_wrlock(&kvpb_rt.lock);
		pp = kvpb_rt_find_locked(h, op->ro_key, op->ro_klen);
		if (*pp) {
			st = -EEXIST;
		} else {
			n->next = NULL;
			*pp = n;
			n = NULL;
			st = 0;
		}
		pthread_rwlock_unlock(&kvpb_rt.lock);
		if (n) {
			free(n->val);
			free(n);
		}
		return st;
	case RPC_DEL:
		pthread_rwlock_wrlock(&kvpb_rt.lock);
		pp = kvpb_rt_find_locked(h, op->ro_key, op->ro_klen);
		n = *pp;
		if (n)
			*pp = n->next;
		pthread_rwlock_unlock(&kvpb_rt.lock);
		if (!n)
			return -ENOENT;
		free(n->val);
		free(n);
		return 0;
	default:
		return -EINVAL;
	}
}

/* One connection: receive the worker's buffer (memfd + size), then serve
 * requests until it hangs up. */
static void *
kvpb_rpc_conn(void *arg)
{
	int fd = (int)(intptr_t)arg, mfd = -1;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	struct kvpb_rpc_hdr hdr;
	/* a request: header + ops; a reply: header + statuses */
	unsigned char *req = malloc(sizeof(hdr) + KVPB_RPC_MAXN * sizeof(struct kvpb_rpc_op));
	unsigned char *rep = malloc(sizeof(hdr) + KVPB_RPC_MAXN * sizeof(int64_t));
	struct kvpb_rpc_op *ops = (struct kvpb_rpc_op *)(void *)(req + sizeof(hdr));
	int64_t *st = (int64_t *)(void *)(rep + sizeof(hdr));
	unsigned char *buf = MAP_FAILED;
	uint64_t bufsz = 0;
	struct iovec iov = { &bufsz, sizeof(bufsz) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = cm.b, .msg_controllen = sizeof(cm.b) };
	struct cmsghdr *c;
	char ok = 1;

	if (!req || !rep || recvmsg(fd, &mh, MSG_WAITALL) != (ssize_t)sizeof(bufsz))
		goto out;
	c = CMSG_FIRSTHDR(&mh);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		goto out;
	memcpy(&mfd, CMSG_DATA(c), sizeof(int));
	buf = mmap(NULL, bufsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mfd, 0);
	if (buf == MAP_FAILED || kvpb_write_full(fd, &ok, 1))
		goto out;
	while (kvpb_read_msg(fd, req, sizeof(hdr) + KVPB_RPC_MAXN * sizeof(*ops),
			     sizeof(*ops)) == 0) {
		struct kvpb_rpc_hdr rh = { 0, 0 };
		uint32_t k;

		memcpy(&hdr, req, sizeof(hdr));
		if (hdr.rh_n && ops[0].ro_op == RPC_EXISTS) {
			/* the prefix of present keys, one shared lock */
			pthread_rwlock_rdlock(&kvpb_rt.lock);
			for (k = 0; k < hdr.rh_n; k++) {
				const struct kvpb_rpc_op *op = &ops[k];
				uint64_t h = kvp_hash(7, op->ro_key, op->ro_klen);

				if (op->ro_klen > KVPB_RPC_KMAX ||
				    !*kvpb_rt_find_locked(h, op->ro_key, op->ro_klen))
					break;
			}
			pthread_rwlock_unlock(&kvpb_rt.lock);
			rh.rh_prefix = k;
			if (kvpb_write_full(fd, &rh, sizeof(rh)))
				break;
			continue;
		}
		for (k = 0; k < hdr.rh_n; k++)
			st[k] = kvpb_rt_op(&ops[k], buf, bufsz);
		rh.rh_n = hdr.rh_n;
		memcpy(rep, &rh, sizeof(rh)); /* one write: header and statuses */
		if (kvpb_write_full(fd, rep, sizeof(rh) + hdr.rh_n * sizeof(*st)))
			break;
	}
out:
	if (buf != MAP_FAILED)
		munmap(buf, bufsz);
	if (mfd >= 0)
		close(mfd);
	close(fd);
	free(req);
	free(rep);
	return NULL;
}

static void __attribute__((noreturn))
kvpb_rpc_server(int lfd)
{
	pthread_rwlockattr_t ra;

	/* a long-lived server keeps its heap: no mmap per value, no trim */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, INT_MAX);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&kvpb_rt.lock, &ra);
	kvpb_rt.mask = (1u << 20) - 1;
	kvpb_rt.b = calloc(kvpb_rt.mask + 1, sizeof(*kvpb_rt.b));
	if (!kvpb_rt.b)
		_exit(1);
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		if (pthread_create(&t, NULL, kvpb_rpc_conn, (void *)(intptr_t)fd))
			close(fd);
		else
			pthread_detach(t);
	}
}

static pid_t kvpb_rpc_pid = -1;

static int
kvpb_rpc_start(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int lfd;

	snprintf(ctl->rpc_sock, sizeof(ctl->rpc_sock), "/tmp/kvpb-rpc.%d.sock", (int)getpid());
	unlink(ctl->rpc_sock);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", ctl->rpc_sock);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 64)) {
		if (lfd >= 0)
			close(lfd);
		return -errno;
	}
	kvpb_rpc_pid = fork();
	if (kvpb_rpc_pid < 0) {
		close(lfd);
		return -errno;
	}
	if (kvpb_rpc_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		kvpb_close_fds_but(lfd);
		kvpb_rpc_server(lfd);
	}
	close(lfd);
	return 0;
}

/* ==== the RPC shape: client ==== */

struct kvpb_rpc {
	int fd;
	unsigned char *buf; /* registered: [0, half) lands gets, [half, 2 half) puts */
	uint64_t bufsz, half;
	unsigned char *req, *rep; /* messages: header, then ops / statuses */
	struct kvpb_rpc_op *ops;  /* in req */
	int64_t *st;              /* in rep */
};

static int
kvpb_rpc_connect(struct kvpb_rpc *r, uint64_t half, const unsigned char *putsrc,
		 uint64_t putlen)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = cm.b, .msg_controllen = sizeof(cm.b) };
	struct cmsghdr *c;
	uint64_t k;
	char ok;
	int mfd;

	memset(r, 0, sizeof(*r));
	r->half = half;
	r->bufsz = 2 * half;
	r->req = malloc(sizeof(struct kvpb_rpc_hdr) + KVPB_RPC_MAXN * sizeof(*r->ops));
	r->rep = malloc(sizeof(struct kvpb_rpc_hdr) + KVPB_RPC_MAXN * sizeof(*r->st));
	mfd = memfd_create("kvpb-rpc", MFD_CLOEXEC);
	if (!r->req || !r->rep || mfd < 0 || ftruncate(mfd, (off_t)r->bufsz))
		goto err;
	r->ops = (struct kvpb_rpc_op *)(void *)(r->req + sizeof(struct kvpb_rpc_hdr));
	r->st = (int64_t *)(void *)(r->rep + sizeof(struct kvpb_rpc_hdr));
	r->buf = mmap(NULL, r->bufsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mfd, 0);
	if (r->buf == MAP_FAILED)
		goto err;
	memset(r->buf, 0, r->half);
	/* the put half holds the pages a worker stores (the same value as
	 * the other systems' put source) */
	for (k = 0; putlen && k + putlen <= r->half; k += putlen)
		memcpy(r->buf + r->half + k, putsrc, putlen);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", ctl->rpc_sock);
	if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&a, sizeof(a)))
		goto err;
	iov.iov_base = &r->bufsz;
	iov.iov_len = sizeof(r->bufsz);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &mfd, sizeof(int));
	if (sendmsg(r->fd, &mh, 0) != (ssize_t)sizeof(r->bufsz) ||
	    kvpb_read_full(r->fd, &ok, 1))
		goto err;
	close(mfd);
	return 0;
err:
	kvpb_log("bench_peers: rpc connect: %s\n", strerror(errno));
	if (mfd >= 0)
		close(mfd);
	return -EIO;
}

/* One round trip: the n ops in r->ops go out in one write, the reply
 * (statuses in r->st; RPC_EXISTS: *prefix) comes back.  0 or -EIO. */
static int
kvpb_rpc_call(struct kvpb_rpc *r, uint32_t n, uint32_t *prefix)
{
	struct kvpb_rpc_hdr h = { n, 0 };

	memcpy(r->req, &h, sizeof(h));
	if (kvpb_write_full(r->fd, r->req, sizeof(h) + n * sizeof(*r->ops)) ||
	    kvpb_read_msg(r->fd, r->rep, sizeof(h) + KVPB_RPC_MAXN * sizeof(*r->st),
			  sizeof(*r->st)))
		return -EIO;
	memcpy(&h, r->rep, sizeof(h));
	if (prefix)
		*prefix = h.rh_prefix;
	return 0;
}

static void
kvpb_rpc_setop(struct kvpb_rpc_op *op, unsigned kind, const unsigned char *key,
	       uint64_t off, uint64_t len)
{
	op->ro_op = (uint8_t)kind;
	op->ro_klen = KVPB_KLEN;
	op->ro_off = off;
	op->ro_len = len;
	memcpy(op->ro_key, key, KVPB_KLEN);
}

/* ==== systems: the parent's handles (fill, cleanup) ==== */

static struct kvpt_agent kvpb_agent[1 + KVPB_MAX_IX];
static bool kvpb_agent_up[1 + KVPB_MAX_IX];
static struct kvp_client *kvpb_pc[1 + KVPB_MAX_IX];
static MDB_env *kvpb_penv;
static MDB_dbi kvpb_pdbi;
static redisContext *kvpb_predis;
static pid_t kvpb_redis_pid = -1;
static struct kvpb_rpc kvpb_prpc;

static int
kvpb_lmdb_open(MDB_env **env, MDB_dbi *dbi)
{
	MDB_txn *t;
	int rc;

	rc = mdb_env_create(env);
	if (!rc)
		rc = mdb_env_set_mapsize(*env, ctl->lmdb_mapsize);
	if (!rc)
		rc = mdb_env_set_maxreaders(*env, 2 * KVPB_MAX_PROCS + 8);
	if (!rc)
		rc = mdb_env_open(*env, ctl->lmdb_dir, MDB_NOSYNC | MDB_WRITEMAP, 0600);
	if (!rc)
		rc = mdb_txn_begin(*env, NULL, 0, &t);
	if (!rc) {
		rc = mdb_dbi_open(t, NULL, 0, dbi);
		if (rc)
			mdb_txn_abort(t);
		else
			rc = mdb_txn_commit(t);
	}
	if (rc)
		kvpb_log("bench_peers: lmdb: %s\n", mdb_strerror(rc));
	return rc ? -EIO : 0;
}

static redisContext *
kvpb_redis_connect(void)
{
	redisContext *c = redisConnectUnix(ctl->redis_sock);

	if (!c || c->err) {
		if (c)
			redisFree(c);
		return NULL;
	}
	c->reader->maxbuf = 0; /* keep the read buffer: no free per reply */
	return c;
}

static bool
kvpb_redis_ready(void *arg)
{
	redisContext *c = kvpb_redis_connect();
	redisReply *r;
	bool ok = false;

	(void)arg;
	if (!c)
		return false;
	r = redisCommand(c, "PING");
	ok = r && r->type == REDIS_REPLY_STATUS;
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return ok;
}

static int
kvpb_redis_start(void)
{
	char log[128];

	snprintf(ctl->redis_sock, sizeof(ctl->redis_sock), "/tmp/kvpb-redis.%d.sock",
		 (int)getpid());
	snprintf(log, sizeof(log), "/tmp/kvpb-redis.%d.log", (int)getpid());
	unlink(ctl->redis_sock);
	kvpb_redis_pid = fork();
	if (kvpb_redis_pid < 0)
		return -errno;
	if (kvpb_redis_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		kvpb_close_fds_but(-1);
		execlp("redis-server", "redis-server", "--port", "0", "--unixsocket",
		       ctl->redis_sock, "--unixsocketperm", "700", "--save", "",
		       "--appendonly", "no", "--dir", "/tmp", "--logfile", log,
		       "--daemonize", "no", "--maxmemory", "0", (char *)NULL);
		_exit(127);
	}
	if (kvpt_wait_until(kvpb_redis_ready, NULL, 10000) < 0) {
		kvpb_log("bench_peers: redis-server did not come up (log %s)\n", log);
		return -ETIMEDOUT;
	}
	kvpb_predis = kvpb_redis_connect();
	return kvpb_predis ? 0 : -EIO;
}

/* ==== the workers ==== */

struct kvpb_worker {
	unsigned w;
	int cmd_fd;
	struct kvp_client *kc[1 + KVPB_MAX_IX];
	MDB_env *env;
	MDB_dbi dbi;
	MDB_txn *rtxn;
	redisContext *rc;
	struct kvpb_rpc rpc;
	bool rpc_up;
	unsigned char *dst;  /* private destination of gets */
	unsigned char *src;  /* put source, cache-hot */
	uint64_t maxbb;      /* the largest batch in bytes */
	unsigned char *mput; /* the memcpy baseline's put region (tmpfs) */
	uint64_t mput_sz;
	unsigned char *pkeys; /* this measurement's new keys */
	uint64_t pkeys_cap;
	struct kvp_op *ops;
	struct kvp_op *ixops[KVPB_MAX_IX];
	const unsigned char *kp[KVPB_RPC_MAXN];
	uint64_t *lat;        /* rtt: one time per call */
	uint64_t lat_cap;
};

/* Open system sys's client in this worker, once. */
static int
kvpb_w_open(struct kvpb_worker *W, unsigned sys, unsigned pool)
{
	int rc = 0;

	switch (sys) {
	case SYS_KVPOOL:
		if (!W->kc[pool])
			rc = kvp_open(ctl->pool[pool], "bench", &W->kc[pool]);
		break;
	case SYS_LMDB:
		if (!W->env) {
			rc = kvpb_lmdb_open(&W->env, &W->dbi);
			if (!rc && mdb_txn_begin(W->env, NULL, MDB_RDONLY, &W->rtxn))
				rc = -EIO;
			if (!rc)
				mdb_txn_reset(W->rtxn);
		}
		break;
	case SYS_REDIS:
		if (!W->rc)
			W->rc = kvpb_redis_connect();
		rc = W->rc ? 0 : -EIO;
		break;
	case SYS_RPC:
	case SYS_RPC1: /* the same connection: a worker has one client */
		if (!W->rpc_up) {
			rc = kvpb_rpc_connect(&W->rpc, W->maxbb, W->src, cfg.sizes[0]);
			W->rpc_up = rc == 0;
		}
		break;
	default:
		break;
	}
	if (rc)
		kvpb_log("bench_peers: worker %u: cannot open %s: %d\n", W->w,
			 kvpb_sys_name[sys], rc);
	return rc;
}

/* Get the m values v->keys[idx[k]] into the worker's buffer: one batch.
 * Returns how many did not come back whole.  check: verify the first. */
static uint64_t
kvpb_w_get(struct kvpb_worker *W, unsigned sys, const struct kvpb_vset *v,
	   const uint64_t *idx, unsigned m, bool check)
{
	uint64_t sz = v->size, bad = 0;
	const unsigned char *first = W->dst;
	unsigned k;

	switch (sys) {
	case SYS_MEMCPY:
		for (k = 0; k < m; k++)
			memcpy(W->dst + k * sz, v->mc + idx[k] * sz, sz);
		break;
	case SYS_KVPOOL:
		if (m == 1) {
			bad += kvp_get(W->kc[0], v->keys + idx[0] * KVPB_KLEN, KVPB_KLEN,
				       W->dst, sz) != (ssize_t)sz;
			break;
		}
		for (k = 0; k < m; k++) {
			W->ops[k].key = v->keys + idx[k] * KVPB_KLEN;
			W->ops[k].klen = KVPB_KLEN;
			W->ops[k].buf = W->dst + k * sz;
			W->ops[k].off = 0;
			W->ops[k].len = sz;
		}
		bad += m - (uint64_t)kvp_batch_get(W->kc[0], W->ops, m);
		break;
	case SYS_LMDB:
		if (mdb_txn_renew(W->rtxn))
			return m;
		for (k = 0; k < m; k++) {
			MDB_val key = { KVPB_KLEN, kvpb_unconst(v->keys + idx[k] * KVPB_KLEN) };
			MDB_val val;

			if (mdb_get(W->rtxn, W->dbi, &key, &val) || val.mv_size != sz) {
				bad++;
				continue;
			}
			memcpy(W->dst + k * sz, val.mv_data, sz);
		}
		mdb_txn_reset(W->rtxn);
		break;
	case SYS_REDIS:
		for (k = 0; k < m; k++)
			redisAppendCommand(W->rc, "GET %b", v->keys + idx[k] * KVPB_KLEN,
					   (size_t)KVPB_KLEN);
		for (k = 0; k < m; k++) {
			redisReply *r = NULL;

			if (redisGetReply(W->rc, (void **)&r) != REDIS_OK || !r) {
				bad += m - k;
				break;
			}
			if (r->type == REDIS_REPLY_STRING && r->len == sz)
				memcpy(W->dst + k * sz, r->str, sz);
			else
				bad++;
			freeReplyObject(r);
		}
		break;
	case SYS_RPC:
		for (k = 0; k < m; k++)
			kvpb_rpc_setop(&W->rpc.ops[k], RPC_GET, v->keys + idx[k] * KVPB_KLEN,
				       k * sz, sz);
		if (kvpb_rpc_call(&W->rpc, m, NULL))
			return m;
		for (k = 0; k < m; k++)
			bad += W->rpc.st[k] != (int64_t)sz;
		first = W->rpc.buf; /* gets land in the registered buffer */
		break;
	case SYS_RPC1:
		/* get(key) per page: a round trip per value, each landing
		 * where the batched request would have put it */
		for (k = 0; k < m; k++) {
			kvpb_rpc_setop(&W->rpc.ops[0], RPC_GET, v->keys + idx[k] * KVPB_KLEN,
				       k * sz, sz);
			if (kvpb_rpc_call(&W->rpc, 1, NULL))
				return bad + m - k;
			bad += W->rpc.st[0] != (int64_t)sz;
		}
		first = W->rpc.buf;
		break;
	default:
		return m;
	}
	kvpb_clobber(W->dst);
	if (check && !bad && !kvpt_check(first, sz, v->keys + idx[0] * KVPB_KLEN, KVPB_KLEN, 1))
		bad++;
	return bad;
}

/* Put the m new keys keys[0..m) with values of sz bytes.  Returns how
 * many failed.  slot: where the memcpy baseline writes. */
static uint64_t
kvpb_w_put(struct kvpb_worker *W, unsigned sys, const unsigned char *keys, unsigned m,
	   uint64_t sz, uint64_t slot)
{
	uint64_t bad = 0;
	unsigned k;

	switch (sys) {
	case SYS_MEMCPY:
		for (k = 0; k < m; k++) {
			uint64_t nslots = W->mput_sz / sz;

			memcpy(W->mput + ((slot + k) % nslots) * sz, W->src, sz);
		}
		kvpb_clobber(W->mput);
		break;
	case SYS_KVPOOL:
		for (k = 0; k < m; k++)
			bad += kvp_put(W->kc[0], keys + k * KVPB_KLEN, KVPB_KLEN, W->src, sz) != 0;
		break;
	case SYS_LMDB: {
		MDB_txn *t;

		if (mdb_txn_begin(W->env, NULL, 0, &t))
			return m;
		for (k = 0; k < m; k++) {
			MDB_val key = { KVPB_KLEN, kvpb_unconst(keys + k * KVPB_KLEN) };
			MDB_val val = { sz, NULL };

			if (mdb_put(t, W->dbi, &key, &val, MDB_RESERVE | MDB_NOOVERWRITE)) {
				bad++;
				continue;
			}
			memcpy(val.mv_data, W->src, sz);
		}
		if (mdb_txn_commit(t))
			bad = m;
		break;
	}
	case SYS_REDIS:
		for (k = 0; k < m; k++)
			redisAppendCommand(W->rc, "SET %b %b", keys + k * KVPB_KLEN,
					   (size_t)KVPB_KLEN, W->src, (size_t)sz);
		for (k = 0; k < m; k++) {
			redisReply *r = NULL;

			if (redisGetReply(W->rc, (void **)&r) != REDIS_OK || !r) {
				bad += m - k;
				break;
			}
			bad += r->type != REDIS_REPLY_STATUS;
			freeReplyObject(r);
		}
		break;
	case SYS_RPC:
		for (k = 0; k < m; k++)
			kvpb_rpc_setop(&W->rpc.ops[k], RPC_PUT, keys + k * KVPB_KLEN,
				       W->rpc.half + (k * sz) % (W->rpc.half - sz + 1), sz);
		if (kvpb_rpc_call(&W->rpc, m, NULL))
			return m;
		for (k = 0; k < m; k++)
			bad += W->rpc.st[k] != 0;
		break;
	case SYS_RPC1:
		for (k = 0; k < m; k++) {
			kvpb_rpc_setop(&W->rpc.ops[0], RPC_PUT, keys + k * KVPB_KLEN,
				       W->rpc.half + (k * sz) % (W->rpc.half - sz + 1), sz);
			if (kvpb_rpc_call(&W->rpc, 1, NULL))
				return bad + m - k;
			bad += W->rpc.st[0] != 0;
		}
		break;
	default:
		return m;
	}
	return bad;
}

/* Is the prefix of the 2,000 keys at keys[] all present?  Returns the
 * length of the present prefix. */
static uint64_t
kvpb_w_prefix(struct kvpb_worker *W, unsigned sys, unsigned ix, const unsigned char *keys,
	      uint64_t first)
{
	unsigned k, n = KVPB_PREFIX;
	uint32_t prefix = 0;

	switch (sys) {
	case SYS_KVPOOL: {
		ssize_t got = kvp_batch_exists_prefix(W->kc[1 + ix], W->ixops[ix] + first, n);

		return got < 0 ? 0 : (uint64_t)got;
	}
	case SYS_LMDB:
		if (mdb_txn_renew(W->rtxn))
			return 0;
		for (k = 0; k < n; k++) {
			MDB_val key = { KVPB_KLEN, kvpb_unconst(keys + k * KVPB_KLEN) };
			MDB_val val;

			if (mdb_get(W->rtxn, W->dbi, &key, &val))
				break;
		}
		mdb_txn_reset(W->rtxn);
		return k;
	case SYS_REDIS: {
		unsigned lead = 0;
		bool gap = false;

		for (k = 0; k < n; k++)
			redisAppendCommand(W->rc, "EXISTS %b", keys + k * KVPB_KLEN,
					   (size_t)KVPB_KLEN);
		for (k = 0; k < n; k++) {
			redisReply *r = NULL;

			if (redisGetReply(W->rc, (void **)&r) != REDIS_OK || !r)
				return lead;
			if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
				gap = true;
			else if (!gap)
				lead++;
			freeReplyObject(r);
		}
		return lead;
	}
	case SYS_RPC:
		for (k = 0; k < n; k++)
			kvpb_rpc_setop(&W->rpc.ops[k], RPC_EXISTS, keys + k * KVPB_KLEN, 0, 0);
		if (kvpb_rpc_call(&W->rpc, n, &prefix))
			return 0;
		return prefix;
	default:
		return 0;
	}
}

static uint64_t
kvpb_mix_tag(unsigned round, unsigned w, unsigned s)
{
	return KVPB_TAG_MIX + ((uint64_t)round * KVPB_MAX_PROCS + w) * KVPB_MAX_SIZES + s;
}

/* How many puts a worker makes in one mixed measurement (also the
 * parent's count of keys to delete afterwards). */
static uint64_t
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

static int
kvpb_w_run(struct kvpb_worker *W, const struct kvpb_cmd *cmd)
{
	struct kvpb_wres *res = &ctl->res[W->w];
	const struct kvpb_vset *v = cmd->sec <= SEC_MIXED || cmd->sec == SEC_RTT
				    ? &kvpb_vs[cmd->s] : NULL;
	uint64_t idx[KVPB_RPC_MAXN], j = 0, done = 0, bad = 0, nput = 0, bytes = 0;
	uint64_t sum = 0, worst = 0;
	unsigned ix = cmd->s;
	char ack = 1;
	int rc;

	memset(res, 0, sizeof(*res));
	rc = kvpb_w_open(W, cmd->sys, cmd->sec == SEC_PREFIX || cmd->sec == SEC_EXISTS
				   ? 1 + ix : 0);
	if (v)
		j = W->w * v->n / cmd->procs; /* workers start apart */
	if (!rc && cmd->sec == SEC_MIXED) {
		uint64_t k;

		nput = kvpb_mixed_puts(v, cmd->iters);
		if (nput * KVPB_KLEN > W->pkeys_cap) {
			free(W->pkeys);
			W->pkeys_cap = nput * KVPB_KLEN;
			W->pkeys = malloc(W->pkeys_cap);
			if (!W->pkeys)
				rc = -ENOMEM;
		}
		for (k = 0; !rc && k < nput; k++)
			kvpb_key(W->pkeys + k * KVPB_KLEN,
				 kvpb_mix_tag(cmd->round, W->w, cmd->s), k);
		if (cmd->sys == SYS_MEMCPY && !W->mput) {
			/* the baseline's puts: a tmpfs region of its own */
			W->mput_sz = cfg.ws / 2 + cfg.sizes[cfg.nsizes - 1] * 16;
			W->mput = kvpb_shm_region(W->mput_sz);
			if (!W->mput)
				rc = -ENOMEM;
		}
	}
	if (!rc && (cmd->sec == SEC_PREFIX || cmd->sec == SEC_EXISTS) &&
	    cmd->sys == SYS_KVPOOL && !W->ixops[ix]) {
		uint64_t k, n = ctl->ix_n[ix];

		W->ixops[ix] = calloc(n ? n : 1, sizeof(struct kvp_op));
		for (k = 0; W->ixops[ix] && k < n; k++) {
			W->ixops[ix][k].key = kvpb_ixkeys[ix] + k * KVPB_KLEN;
			W->ixops[ix][k].klen = KVPB_KLEN;
		}
		if (!W->ixops[ix])
			rc = -ENOMEM;
	}
	if (!rc && cmd->sec == SEC_RTT && cmd->iters > W->lat_cap) {
		free(W->lat);
		W->lat_cap = cmd->iters;
		W->lat = malloc(W->lat_cap * sizeof(*W->lat));
		if (!W->lat) {
			W->lat_cap = 0;
			rc = -ENOMEM;
		}
	}
	/* ready; then wait for the start */
	if (kvpb_write_full(kvpb_ack_wr, &ack, 1))
		return -EPIPE;
	/* acquire: pairs with the parent's release of go; spinning is brief
	 * (the parent stores go once every worker is ready), and yields every
	 * 1,024 polls: the parent may be waiting for this very CPU */
	{
		unsigned spins = 0;

		while (kvp_load_acquire(&ctl->go) != cmd->seq)
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
			bad += kvpb_w_get(W, cmd->sys, v, idx, m, cmd->round == 0);
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
			bad += kvpb_w_get(W, cmd->sys, v, idx, hb, cmd->round == 0);
			bad += kvpb_w_put(W, cmd->sys, W->pkeys + p * KVPB_KLEN, hb, v->size, p);
			p += hb;
			done += 2 * hb;
		}
		bytes = done * v->size;
	} else if (cmd->sec == SEC_PREFIX) {
		uint64_t nb = ctl->ix_n[ix] / KVPB_PREFIX, b, it;

		for (it = 0; nb && it < cmd->iters; it++) {
			uint64_t t0, t;

			b = it % nb;
			t0 = kvpb_now_ns();
			bad += kvpb_w_prefix(W, cmd->sys, ix,
					     kvpb_ixkeys[ix] + b * KVPB_PREFIX * KVPB_KLEN,
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
			bad += kvpb_w_get(W, cmd->sys, v, idx, 1, cmd->round == 0);
			t = kvpb_now_ns() - t0;
			W->lat[done] = t;
			sum += t;
			worst = t > worst ? t : worst;
		}
		bytes = done * v->size;
	} else if (cmd->sec == SEC_EXISTS && cmd->sys == SYS_KVPOOL) {
		uint64_t n = ctl->ix_n[ix];

		for (done = 0; n && done < cmd->iters; done++) {
			bad += kvp_exists(W->kc[1 + ix], kvpb_ixkeys[ix] + j * KVPB_KLEN,
					  KVPB_KLEN) != 1;
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

static void __attribute__((noreturn))
kvpb_worker_main(unsigned w, int cmd_fd)
{
	struct kvpb_worker W;
	struct kvpb_cmd cmd;
	unsigned s;

	memset(&W, 0, sizeof(W));
	W.w = w;
	W.cmd_fd = cmd_fd;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	kvpb_pin(w);
	W.maxbb = KVPB_RTT_SIZE;
	for (s = 0; s < cfg.nsizes; s++)
		if (kvpb_vs[s].batch * kvpb_vs[s].size > W.maxbb)
			W.maxbb = kvpb_vs[s].batch * kvpb_vs[s].size;
	W.dst = kvpb_alloc(W.maxbb);
	W.src = kvpb_alloc(cfg.sizes[cfg.nsizes - 1]);
	W.ops = calloc(KVPB_RPC_MAXN, sizeof(*W.ops));
	if (!W.dst || !W.src || !W.ops)
		_exit(3);
	/* the put source: the smallest value size repeated (a fixed page) */
	for (s = 0; s + cfg.sizes[0] <= cfg.sizes[cfg.nsizes - 1]; s += (unsigned)cfg.sizes[0])
		kvpt_fill(W.src + s, cfg.sizes[0], "put", 3, 1);
	while (kvpb_read_full(cmd_fd, &cmd, sizeof(cmd)) == 0 && cmd.op == CMD_RUN)
		if (kvpb_w_run(&W, &cmd))
			break;
	/* exit without closing: the pool's reaper handles the slot */
	for (s = 0; s < 1 + KVPB_MAX_IX; s++)
		if (W.kc[s])
			kvp_close(W.kc[s]);
	if (W.env) {
		mdb_txn_abort(W.rtxn);
		mdb_env_close(W.env);
	}
	if (W.rc)
		redisFree(W.rc);
	_exit(0);
}

static int
kvpb_workers_start(void)
{
	int ack[2];
	unsigned w;

	if (pipe2(ack, O_CLOEXEC))
		return -errno;
	kvpb_ack_rd = ack[0];
	kvpb_ack_wr = ack[1];
	for (w = 0; w < cfg.nworkers; w++) {
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

/* Run one command on workers 0..procs-1, started together.  Fills the
 * aggregate: wall time (first start to last finish), busy time summed
 * over the workers, operations, bytes, failures. */
struct kvpb_agg {
	double wall_s, busy_s, sum_ns, worst_ns, p50_ns, p99_ns;
	uint64_t ops, bytes, bad;
};

static int
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
	/* release: the workers' acquire loads see the new seq and start */
	kvp_store_release(&ctl->go, cmd->seq);
	rc = kvpb_acks(cmd->procs);
	if (rc)
		return rc;
	memset(a, 0, sizeof(*a));
	for (w = 0; w < cmd->procs; w++) {
		const struct kvpb_wres *r = &ctl->res[w];

		t0 = r->t0 < t0 ? r->t0 : t0;
		t1 = r->t1 > t1 ? r->t1 : t1;
		a->busy_s += (double)(r->t1 - r->t0) / 1e9;
		a->ops += r->ops;
		a->bytes += r->bytes;
		a->bad += r->bad;
		a->sum_ns += (double)r->sum_ns;
		a->worst_ns = (double)r->worst_ns > a->worst_ns ? (double)r->worst_ns : a->worst_ns;
		/* rtt runs on one worker; with more, the slowest one's */
		a->p50_ns = (double)r->p50_ns > a->p50_ns ? (double)r->p50_ns : a->p50_ns;
		a->p99_ns = (double)r->p99_ns > a->p99_ns ? (double)r->p99_ns : a->p99_ns;
	}
	a->wall_s = (double)(t1 - t0) / 1e9;
	return 0;
}

static void
kvpb_workers_stop(void)
{
	struct kvpb_cmd cmd = { .op = CMD_EXIT };
	unsigned w;

	for (w = 0; w < cfg.nworkers; w++) {
		if (kvpb_wpid[w] <= 0)
			continue;
		if (kvpb_write_full(kvpb_cmd_fd[w], &cmd, sizeof(cmd)))
			kill(kvpb_wpid[w], SIGKILL);
		close(kvpb_cmd_fd[w]);
	}
	for (w = 0; w < cfg.nworkers; w++)
		if (kvpb_wpid[w] > 0)
			waitpid(kvpb_wpid[w], NULL, 0);
}

/* ==== set-up: fill every system with the same data ==== */

static int
kvpb_pool_start(unsigned k, uint64_t dram, const char *unit, uint64_t entries)
{
	char d[32], e[32];
	int rc;

	snprintf(d, sizeof(d), "%lluK", (unsigned long long)(dram >> 10));
	snprintf(e, sizeof(e), "%llu", (unsigned long long)entries);
	rc = kvpt_agent_start(&kvpb_agent[k], "--dram", d, "--dram-unit", unit,
			      "--index-entries", e, "--dram-high", "100", "--dram-low", "99",
			      NULL);
	if (rc) {
		char log[2200];

		kvpt_agent_log(kvpb_agent[k].pool, log, sizeof(log));
		kvpb_log("bench_peers: cannot start kvpoold (%s/kvpoold --dram %s): %s; "
			 "log %s\n", kvpt_bindir(), d, strerror(-rc), log);
		kvpt_agent_stop(&kvpb_agent[k]);
		return rc;
	}
	kvpb_agent_up[k] = true;
	snprintf(ctl->pool[k], sizeof(ctl->pool[k]), "%s", kvpb_agent[k].pool);
	rc = kvp_open(kvpb_agent[k].pool, "bench", &kvpb_pc[k]);
	if (rc)
		kvpb_log("bench_peers: kvp_open: %s\n", kvp_strerror(rc));
	return rc;
}

/* Put one key into every selected system but memcpy (parent handles). */
static int
kvpb_fill_one(unsigned pool, const unsigned char *key, const void *val, uint64_t len,
	      MDB_txn *t)
{
	int bad = 0;

	if (cfg.sys_mask & (1u << SYS_KVPOOL)) {
		int rc;

		while ((rc = kvp_put(kvpb_pc[pool], key, KVPB_KLEN, val, len)) == -EBUSY)
			;
		bad += rc != 0;
	}
	if (t) {
		MDB_val k = { KVPB_KLEN, kvpb_unconst(key) }, v = { len, kvpb_unconst(val) };

		bad += mdb_put(t, kvpb_pdbi, &k, &v, 0) != 0;
	}
	if (kvpb_predis)
		redisAppendCommand(kvpb_predis, "SET %b %b", key, (size_t)KVPB_KLEN, val,
				   (size_t)len);
	return bad;
}

/* Collect n pipelined redis replies; returns how many were not OK. */
static uint64_t
kvpb_redis_drain(uint64_t n)
{
	uint64_t k, bad = 0;

	for (k = 0; kvpb_predis && k < n; k++) {
		redisReply *r = NULL;

		if (redisGetReply(kvpb_predis, (void **)&r) != REDIS_OK || !r)
			return bad + n - k;
		bad += r->type == REDIS_REPLY_ERROR;
		freeReplyObject(r);
	}
	return bad;
}

/* RPC puts of n keys whose values sit at [half, half + len) of the
 * parent's registered buffer. */
static uint64_t
kvpb_rpc_fill(const unsigned char *keys, uint64_t n, uint64_t len, unsigned kind)
{
	uint64_t k = 0, bad = 0;

	if (!kvpb_rpc_on())
		return 0;
	while (k < n) {
		uint32_t m = n - k < 1024 ? (uint32_t)(n - k) : 1024, i;

		for (i = 0; i < m; i++)
			kvpb_rpc_setop(&kvpb_prpc.ops[i], kind, keys + (k + i) * KVPB_KLEN,
				       kvpb_prpc.half, len);
		if (kvpb_rpc_call(&kvpb_prpc, m, NULL))
			return bad + n - k;
		for (i = 0; i < m; i++)
			bad += kvpb_prpc.st[i] < 0;
		k += m;
	}
	return bad;
}

/* The value sets of the get and mixed sections, and the rtt set. */
static int
kvpb_fill_values(void)
{
	unsigned s;
	uint64_t bad = 0, i;
	unsigned char *buf = kvpb_alloc(kvpb_prpc_half());

	if (!buf)
		return -ENOMEM;
	for (s = 0; s <= KVPB_RTT; s++) {
		struct kvpb_vset *v = &kvpb_vs[s];
		MDB_txn *t = NULL;

		if (!v->keys)
			continue; /* sizes not given; or no rtt section */
		for (i = 0; i < v->n; i++) {
			const unsigned char *key = v->keys + i * KVPB_KLEN;

			if (kvpb_penv && !t && mdb_txn_begin(kvpb_penv, NULL, 0, &t))
				return -EIO;
			kvpt_fill(buf, v->size, key, KVPB_KLEN, 1);
			memcpy(v->mc + i * v->size, buf, v->size);
			bad += (uint64_t)kvpb_fill_one(0, key, buf, v->size, t);
			bad += kvpb_redis_drain(1);
			if (kvpb_rpc_on()) {
				memcpy(kvpb_prpc.buf + kvpb_prpc.half, buf, v->size);
				bad += kvpb_rpc_fill(key, 1, v->size, RPC_PUT);
			}
			if (t && (i % 64 == 63 || i + 1 == v->n)) {
				bad += mdb_txn_commit(t) != 0;
				t = NULL;
			}
		}
	}
	free(buf);
	if (bad)
		kvpb_log("bench_peers: %llu puts of the value sets failed\n",
			 (unsigned long long)bad);
	return bad ? -EIO : 0;
}

/*
 * An index set: 1-byte values under 80-byte keys until kvpool's index
 * holds 90% of its slots (a put into a full bucket pair makes the agent
 * evict another key of that pair, so the keys still present are kept,
 * in order); then the same keys into every peer.
 */
static int
kvpb_fill_index(unsigned ix)
{
	uint64_t e = cfg.ix_entries[ix], nslots = kvpb_pow2_at_least(e + e / 4);
	uint64_t cap = nslots * 9 / 10, units = cap + cap / 16 + 64, next = 0, n = 0, k;
	uint64_t fails = 0, nospc = 0, evicted = 0, bad = 0, kept;
	unsigned char *keys = kvpb_ixkeys[ix], one = 1;
	struct kvp_client *c;
	MDB_txn *t = NULL;
	double t0 = kvpb_now_s();
	char name[64];

	if (kvpb_pool_start(1 + ix, units * 4096, "4K", e))
		return -EIO;
	c = kvpb_pc[1 + ix];
	nslots = c->seg.g.g_index_slots;
	if (cap > nslots * 9 / 10)
		cap = nslots * 9 / 10;
	if (cap > kvpb_ixcap[ix])
		cap = kvpb_ixcap[ix];
	while (n < cap && fails < 10000) {
		int rc;

		kvpb_key(keys + n * KVPB_KLEN, KVPB_TAG_IX + ix, next++);
		rc = kvp_put(c, keys + n * KVPB_KLEN, KVPB_KLEN, &one, 1);
		if (rc == -ENOSPC) {
			nospc++;
			fails++;
			continue;
		}
		if (rc) {
			kvpb_log("bench_peers: index fill: %s\n", kvp_strerror(rc));
			return rc;
		}
		fails = 0;
		n++;
	}
	for (k = 0, kept = 0; k < n; k++) {
		if (kvp_exists(c, keys + k * KVPB_KLEN, KVPB_KLEN) != 1) {
			evicted++;
			continue;
		}
		memmove(keys + kept * KVPB_KLEN, keys + k * KVPB_KLEN, KVPB_KLEN);
		kept++;
	}
	n = kept;
	ctl->ix_n[ix] = n;
	ctl->ix_slots[ix] = nslots;
	snprintf(name, sizeof(name), "index%u_load", ix);
	kvpb_info(name, "%.4f of %llu slots (%llu keys present; %llu refused, %llu "
		  "evicted from full bucket pairs; filled in %.1f s)",
		  (double)kvpt_count_state(&c->seg, KVP_IX_READY) / (double)nslots,
		  (unsigned long long)nslots, (unsigned long long)n,
		  (unsigned long long)nospc, (unsigned long long)evicted,
		  kvpb_now_s() - t0);
	/* the same keys into the peers */
	for (k = 0; k < n; k++) {
		const unsigned char *key = keys + k * KVPB_KLEN;

		if (kvpb_penv && !t && mdb_txn_begin(kvpb_penv, NULL, 0, &t))
			return -EIO;
		if (t) {
			MDB_val kk = { KVPB_KLEN, kvpb_unconst(key) }, v = { 1, &one };

			bad += mdb_put(t, kvpb_pdbi, &kk, &v, 0) != 0;
			if (k % 4096 == 4095 || k + 1 == n) {
				bad += mdb_txn_commit(t) != 0;
				t = NULL;
			}
		}
		if (kvpb_predis) {
			redisAppendCommand(kvpb_predis, "SET %b %b", key, (size_t)KVPB_KLEN,
					   &one, (size_t)1);
			if (k % 1024 == 1023 || k + 1 == n)
				bad += kvpb_redis_drain(k % 1024 + 1);
		}
	}
	if (kvpb_rpc_on()) {
		kvpb_prpc.buf[kvpb_prpc.half] = one;
		bad += kvpb_rpc_fill(keys, n, 1, RPC_PUT);
	}
	if (bad)
		kvpb_log("bench_peers: %llu index-set puts into peers failed\n",
			 (unsigned long long)bad);
	return bad ? -EIO : 0;
}

/* After a mixed measurement: delete the new keys again (untimed), and
 * for kvpool wait until the agent has reclaimed them. */
static void
kvpb_mixed_cleanup(const struct kvpb_cmd *cmd, uint64_t used_before)
{
	const struct kvpb_vset *v = &kvpb_vs[cmd->s];
	uint64_t nput = kvpb_mixed_puts(v, cmd->iters), k;
	unsigned char key[KVPB_KLEN];
	unsigned w;

	if (cmd->sys == SYS_MEMCPY)
		return;
	for (w = 0; w < cmd->procs; w++) {
		MDB_txn *t = NULL;
		unsigned char *keys = NULL;

		if (cmd->sys == SYS_LMDB && mdb_txn_begin(kvpb_penv, NULL, 0, &t))
			return;
		if (cmd->sys == SYS_RPC || cmd->sys == SYS_RPC1)
			keys = malloc(nput * KVPB_KLEN);
		for (k = 0; k < nput; k++) {
			kvpb_key(key, kvpb_mix_tag(cmd->round, w, cmd->s), k);
			switch (cmd->sys) {
			case SYS_KVPOOL:
				kvp_delete(kvpb_pc[0], key, KVPB_KLEN);
				break;
			case SYS_LMDB: {
				MDB_val kk = { KVPB_KLEN, key };

				mdb_del(t, kvpb_pdbi, &kk, NULL);
				break;
			}
			case SYS_REDIS:
				redisAppendCommand(kvpb_predis, "UNLINK %b", key,
						   (size_t)KVPB_KLEN);
				break;
			case SYS_RPC:
			case SYS_RPC1:
				if (keys)
					memcpy(keys + k * KVPB_KLEN, key, KVPB_KLEN);
				break;
			default:
				break;
			}
		}
		if (t)
			mdb_txn_commit(t);
		if (cmd->sys == SYS_REDIS)
			kvpb_redis_drain(nput);
		if (keys)
			kvpb_rpc_fill(keys, nput, 0, RPC_DEL);
		free(keys);
	}
	if (cmd->sys == SYS_KVPOOL) {
		struct kvpb_used u = { &kvpb_pc[0]->seg, used_before };

		if (kvpt_wait_until(kvpb_used_below, &u, 10000) < 0)
			kvpb_log("bench_peers: kvpool took > 10 s to reclaim deleted values\n");
	}
}

/* ==== the sections ==== */

static int
kvpb_run_values(unsigned r)
{
	unsigned sec, s, pi, k;

	for (sec = SEC_GET; sec <= SEC_MIXED; sec++) {
		if (!(cfg.sec_mask & (1u << sec)))
			continue;
		for (s = 0; s < cfg.nsizes; s++) {
			const struct kvpb_vset *v = &kvpb_vs[s];
			unsigned np = cfg.nprocs;
			unsigned plist[9];

			memcpy(plist, cfg.procs, sizeof(cfg.procs));
			/* the all-core memcpy, when no process count reaches it */
			if (cfg.procs[cfg.nprocs - 1] < cfg.nproc && sec == SEC_GET &&
			    kvpb_sys_on(SYS_MEMCPY))
				plist[np++] = cfg.nproc < KVPB_MAX_PROCS ? cfg.nproc : KVPB_MAX_PROCS;
			for (pi = 0; pi < np; pi++) {
				unsigned procs = plist[pi];

				for (k = 0; k < KVPB_NSYS; k++) {
					unsigned sys = (k + r) % KVPB_NSYS; /* rotate the order */
					struct kvpb_cmd cmd;
					struct kvpb_agg a;
					uint64_t used = 0;
					char sn[32];
					int rc;

					if (!kvpb_sys_on(sys) || (pi >= cfg.nprocs && sys != SYS_MEMCPY))
						continue;
					memset(&cmd, 0, sizeof(cmd));
					cmd.sec = sec;
					cmd.sys = sys;
					cmd.s = s;
					cmd.procs = procs;
					cmd.round = r;
					cmd.iters = sec == SEC_GET ? v->n * cfg.passes : v->n;
					if (cmd.iters < 2 * v->batch)
						cmd.iters = 2 * v->batch;
					if (sys == SYS_KVPOOL)
						used = kvpt_units_used(&kvpb_pc[0]->seg);
					rc = kvpb_measure(&cmd, &a);
					if (rc) {
						kvpb_log("bench_peers: a worker stopped answering "
							 "(%s)\n", strerror(-rc));
						return rc;
					}
					if (sec == SEC_MIXED)
						kvpb_mixed_cleanup(&cmd, used);
					if (a.bad)
						kvpb_log("bench_peers: %s %s %s x%u: %llu failed\n",
							 kvpb_sec_name[sec], kvpb_sys_name[sys],
							 kvpb_size_name(v->size, sn, sizeof(sn)), procs,
							 (unsigned long long)a.bad);
					if (r == 0)
						continue;
					/* batch: keys per call (rpc1: per request) */
					kvpb_emit(r, kvpb_sec_name[sec], kvpb_sys_name[sys], v->size,
						  procs, sys == SYS_RPC1 ? 1 : v->batch, a.bad,
						  "GB/s", (double)a.bytes / a.wall_s / 1e9,
						  "Mop/s", (double)a.ops / a.wall_s / 1e6,
						  "ns/op", a.busy_s * 1e9 / (double)a.ops,
						  "s", a.wall_s, (const char *)NULL);
				}
			}
		}
	}
	return 0;
}

static int
kvpb_run_index(unsigned r)
{
	unsigned ix, k;

	for (ix = 0; ix < cfg.nix; ix++) {
		for (k = 0; k < KVPB_NSYS; k++) {
			unsigned sys = (k + r) % KVPB_NSYS;
			struct kvpb_cmd cmd;
			struct kvpb_agg a;

			/* rpc1 would make 2,000 round trips a batch (see rtt) */
			if (!kvpb_sys_on(sys) || sys == SYS_MEMCPY || sys == SYS_RPC1)
				continue;
			memset(&cmd, 0, sizeof(cmd));
			cmd.sec = SEC_PREFIX;
			cmd.sys = sys;
			cmd.s = ix;
			cmd.procs = 1;
			cmd.round = r;
			cmd.iters = cfg.prefix_batches;
			if (kvpb_measure(&cmd, &a))
				return -EPIPE;
			if (r && a.ops)
				kvpb_emit(r, "prefix", kvpb_sys_name[sys], ctl->ix_slots[ix], 1,
					  KVPB_PREFIX, a.bad,
					  "us/batch", a.sum_ns / 1e3 * KVPB_PREFIX / (double)a.ops,
					  "worst us", a.worst_ns / 1e3,
					  "Mlookup/s", (double)a.ops * 1e3 / a.sum_ns,
					  "load", (double)ctl->ix_n[ix] / (double)ctl->ix_slots[ix],
					  (const char *)NULL);
			if (sys != SYS_KVPOOL)
				continue;
			cmd.sec = SEC_EXISTS;
			cmd.iters = cfg.exists_ops;
			if (kvpb_measure(&cmd, &a))
				return -EPIPE;
			if (r && a.ops)
				kvpb_emit(r, "exists", "kvpool", ctl->ix_slots[ix], 1, 1, a.bad,
					  "Mlookup/s", (double)a.ops / a.wall_s / 1e6,
					  "ns/op", a.wall_s * 1e9 / (double)a.ops,
					  "load", (double)ctl->ix_n[ix] / (double)ctl->ix_slots[ix],
					  (const char *)NULL);
		}
	}
	return 0;
}

/*
 * The round trip: a 1-key get of a 4 KiB value, one worker, every call
 * timed.  kvpool (kvp_get), rpc1 (one request, one reply) and memcpy of
 * the same bytes out of tmpfs (the copy both of them include).
 */
static int
kvpb_run_rtt(unsigned r)
{
	static const unsigned sys_rtt[] = { SYS_MEMCPY, SYS_KVPOOL, SYS_RPC1 };
	unsigned k;

	for (k = 0; k < 3; k++) {
		unsigned sys = sys_rtt[(k + r) % 3]; /* rotate the order */
		struct kvpb_cmd cmd;
		struct kvpb_agg a;
		int rc;

		if (!kvpb_sys_on(sys))
			continue;
		memset(&cmd, 0, sizeof(cmd));
		cmd.sec = SEC_RTT;
		cmd.sys = sys;
		cmd.s = KVPB_RTT;
		cmd.procs = 1;
		cmd.round = r;
		cmd.iters = cfg.rtt_ops;
		rc = kvpb_measure(&cmd, &a);
		if (rc) {
			kvpb_log("bench_peers: a worker stopped answering (%s)\n", strerror(-rc));
			return rc;
		}
		if (a.bad)
			kvpb_log("bench_peers: rtt %s: %llu failed\n", kvpb_sys_name[sys],
				 (unsigned long long)a.bad);
		if (r == 0 || !a.ops)
			continue;
		kvpb_emit(r, "rtt", kvpb_sys_name[sys], KVPB_RTT_SIZE, 1, 1, a.bad,
			  "us p50", a.p50_ns / 1e3, "us p99", a.p99_ns / 1e3,
			  "us mean", a.sum_ns / 1e3 / (double)a.ops,
			  "us worst", a.worst_ns / 1e3, (const char *)NULL);
	}
	return 0;
}

/*
 * The SSD tier against fio on the same directory, per value size: fio
 * write and read of the same bytes in blocks of the value size (queue
 * depth 16), then a fresh pool that demotes everything (--dram-high 0)
 * and never promotes: the demotion rate, then cold batch gets through
 * the staging arena (every read is an O_DIRECT read off the device).
 * Then the 2,000-key batch of 64 KiB values through an 8-slot arena.
 */
static void
kvpb_run_ssd(unsigned r)
{
	char dir[700], store[800], bs[32], sn[32], d[32];
	double fio_r64 = 0;
	unsigned s;

	snprintf(dir, sizeof(dir), "%s/kvpool-bench-peers.%d", cfg.ssd_dir, (int)getpid());
	for (s = 0; s < cfg.nssd; s++) {
		uint64_t sz = cfg.ssd_sizes[s], bad = 0;
		int n = (int)(cfg.ssd_bytes / sz);
		unsigned mib = (unsigned)((uint64_t)n * sz >> 20);
		struct kvpt_agent a;
		struct kvp_client *c = NULL;
		struct kvp_seg seg;
		double fw, fr, dem, cold;
		int batch;

		kvpb_rm_rf(dir);
		if (mkdir(dir, 0700)) {
			kvpb_log("bench_peers: cannot create %s: %s\n", dir, strerror(errno));
			return;
		}
		snprintf(bs, sizeof(bs), "%lluk", (unsigned long long)(sz >> 10));
		fw = kvpb_fio_bw(dir, "write", bs, mib ? mib : 1, 16);
		fr = kvpb_fio_bw(dir, "read", bs, mib ? mib : 1, 16);
		if (sz == 65536)
			fio_r64 = fr;
		kvpb_rm_rf(dir);
		mkdir(dir, 0700);
		snprintf(store, sizeof(store), "%s/store", dir);
		snprintf(d, sizeof(d), "%lluK", (unsigned long long)(((uint64_t)n * sz + (64u << 20)) >> 10));
		if (kvpt_pool_up(&a, &seg, &c, "--dram", d, "--dram-high", "0", "--dram-low", "0",
				 "--ssd-dir", store, "--staging", "64M", "--staging-slot", "1M",
				 "--no-promote", NULL)) {
			char log[2200];

			kvpt_agent_log(a.pool, log, sizeof(log));
			kvpb_log("bench_peers: cannot start an SSD agent (log %s)\n", log);
			kvpt_agent_stop(&a);
			return;
		}
		dem = kvpb_ssd_fill_and_demote(c, &seg, n, sz);
		batch = (int)((32u << 20) / sz);
		batch = batch > 16 ? 16 : batch < 1 ? 1 : batch;
		cold = kvpb_ssd_cold_gets(c, n, sz, batch, &bad);
		kvpt_pool_down(&a, &seg, c);
		kvpb_log("  ssd %s: fio write %.2f GB/s, demotion %.2f GB/s; fio read %.2f GB/s, "
			 "cold get %.2f GB/s\n", kvpb_size_name(sz, sn, sizeof(sn)),
			 fw / 1e9, dem / 1e9, fr / 1e9, cold / 1e9);
		kvpb_emit(r, "ssd_write", "fio", sz, 1, 16, fw <= 0, "GB/s", fw / 1e9,
			  (const char *)NULL);
		kvpb_emit(r, "ssd_write", "kvpool", sz, 1, 0, 0, "GB/s", dem / 1e9,
			  (const char *)NULL);
		kvpb_emit(r, "ssd_read", "fio", sz, 1, 16, fr <= 0, "GB/s", fr / 1e9,
			  (const char *)NULL);
		kvpb_emit(r, "ssd_read", "kvpool", sz, 1, (unsigned)batch, bad, "GB/s",
			  cold / 1e9, (const char *)NULL);
	}
	{
		/* 2,000 x 64 KiB SSD values, one batch, an 8-slot arena */
		struct kvpt_agent a;
		struct kvp_client *c = NULL;
		struct kvp_seg seg;
		uint64_t bad = 0;
		double t0, secs;

		kvpb_rm_rf(dir);
		mkdir(dir, 0700);
		if (fio_r64 <= 0)
			fio_r64 = kvpb_fio_bw(dir, "read", "64k", 128, 16);
		kvpb_rm_rf(dir);
		mkdir(dir, 0700);
		snprintf(store, sizeof(store), "%s/store64", dir);
		if (kvpt_pool_up(&a, &seg, &c, "--dram", "256M", "--dram-unit", "4K",
				 "--dram-high", "0", "--dram-low", "0", "--ssd-dir", store,
				 "--staging", "512K", "--staging-slot", "64K", "--no-promote",
				 NULL)) {
			kvpb_log("bench_peers: cannot start an SSD agent\n");
			kvpt_agent_stop(&a);
			return;
		}
		kvpb_ssd_fill_and_demote(c, &seg, 2000, 64 << 10);
		t0 = kvpb_now_s();
		kvpb_ssd_cold_gets(c, 2000, 64 << 10, 2000, &bad);
		secs = kvpb_now_s() - t0;
		kvpt_pool_down(&a, &seg, c);
		kvpb_log("  ssd batch: 2000 x 64KiB in %.3f s (bytes / fio 64K read: %.3f s)\n",
			 secs, 2000.0 * 65536 / fio_r64);
		kvpb_emit(r, "ssd_batch", "kvpool", 65536, 1, 2000, bad, "s", secs,
			  "bound s", fio_r64 > 0 ? 2000.0 * 65536 / fio_r64 : 0,
			  "GB/s", 2000.0 * 65536 / secs / 1e9, (const char *)NULL);
		kvpb_emit(r, "ssd_batch", "fio", 65536, 1, 16, fio_r64 <= 0, "GB/s",
			  fio_r64 / 1e9, (const char *)NULL);
	}
	kvpb_rm_rf(dir);
}

/* ==== main ==== */

static int
kvpb_parse_list(const char *arg, const char *const *names, unsigned n, unsigned *mask)
{
	char buf[256], *tok, *save = NULL;
	unsigned k;

	snprintf(buf, sizeof(buf), "%s", arg);
	*mask = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		for (k = 0; k < n && strcmp(tok, names[k]); k++)
			;
		if (k == n) {
			kvpb_log("bench_peers: unknown name '%s'\n", tok);
			return -EINVAL;
		}
		*mask |= 1u << k;
	}
	return *mask ? 0 : -EINVAL;
}

static int
kvpb_parse_u64s(const char *arg, uint64_t *out, unsigned cap, unsigned *n, bool sizes)
{
	char buf[256], *tok, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", arg);
	*n = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v = sizes ? kvpb_parse_size(tok) : strtoull(tok, NULL, 10);

		if (!v || *n == cap)
			return -EINVAL;
		if (*n && v <= out[*n - 1])
			return -EINVAL; /* ascending */
		out[(*n)++] = v;
	}
	return *n ? 0 : -EINVAL;
}

static void
kvpb_usage(FILE *f)
{
	fprintf(f,
		"usage: bench_peers [--quick] [--rounds N] [--sizes 64K,1M,4M] [--procs 1,2]\n"
		"         [--systems memcpy,kvpool,lmdb,redis,rpc,rpc1]\n"
		"         [--sections get,mixed,prefix,ssd,rtt] [--ws SIZE] [--batch N]\n"
		"         [--ssd-dir DIR] [--ssd-sizes 1M,...] [--no-pin]\n"
		"Prints one JSON object per measurement on stdout (stress/bench\n"
		"aggregates them); progress on stderr.\n");
}

static void
kvpb_cleanup(void)
{
	unsigned k;

	for (k = 0; k < 1 + KVPB_MAX_IX; k++) {
		if (kvpb_pc[k])
			kvp_close(kvpb_pc[k]);
		kvpb_pc[k] = NULL;
		if (kvpb_agent_up[k])
			kvpt_agent_stop(&kvpb_agent[k]);
		kvpb_agent_up[k] = false;
	}
	if (kvpb_penv)
		mdb_env_close(kvpb_penv);
	kvpb_penv = NULL;
	if (ctl->lmdb_dir[0])
		kvpb_rm_rf(ctl->lmdb_dir);
	if (kvpb_predis)
		redisFree(kvpb_predis);
	kvpb_predis = NULL;
	if (kvpb_redis_pid > 0) {
		char log[128];

		kill(kvpb_redis_pid, SIGTERM);
		waitpid(kvpb_redis_pid, NULL, 0);
		unlink(ctl->redis_sock);
		snprintf(log, sizeof(log), "/tmp/kvpb-redis.%d.log", (int)getpid());
		unlink(log);
	}
	kvpb_redis_pid = -1;
	if (kvpb_prpc.fd > 0)
		close(kvpb_prpc.fd);
	if (kvpb_rpc_pid > 0) {
		kill(kvpb_rpc_pid, SIGKILL);
		waitpid(kvpb_rpc_pid, NULL, 0);
		unlink(ctl->rpc_sock);
	}
	kvpb_rpc_pid = -1;
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "sizes", required_argument, NULL, 's' },
		{ "procs", required_argument, NULL, 'p' },
		{ "systems", required_argument, NULL, 'y' },
		{ "sections", required_argument, NULL, 'e' },
		{ "ws", required_argument, NULL, 'w' },
		{ "batch", required_argument, NULL, 'b' },
		{ "ssd-dir", required_argument, NULL, 'd' },
		{ "ssd-sizes", required_argument, NULL, 'z' },
		{ "no-pin", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	/* the selectable sections ("exists" comes with "prefix") */
	static const char *const secs[] = { "get", "mixed", "prefix", "ssd", "rtt" };
	static const unsigned sec_bit[] = { SEC_GET, SEC_MIXED, SEC_PREFIX, SEC_SSD, SEC_RTT };
	const char *a_sizes = NULL, *a_procs = NULL, *a_sys = NULL, *a_sec = NULL;
	const char *a_ssd = NULL;
	uint64_t a_ws = 0, u64[8];
	unsigned rounds = 0, batch = 0, k, s, n, mask;
	double t0 = kvpb_now_s(), t;
	int opt, rc = 0;

	signal(SIGPIPE, SIG_IGN); /* a server that dies is an error, not a kill */
	cfg.pin = true;
	snprintf(cfg.ssd_dir, sizeof(cfg.ssd_dir), "/var/tmp");
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'q': cfg.quick = true; break;
		case 'r': rounds = (unsigned)strtoul(optarg, NULL, 10); break;
		case 's': a_sizes = optarg; break;
		case 'p': a_procs = optarg; break;
		case 'y': a_sys = optarg; break;
		case 'e': a_sec = optarg; break;
		case 'w': a_ws = kvpb_parse_size(optarg); break;
		case 'b': batch = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'd': snprintf(cfg.ssd_dir, sizeof(cfg.ssd_dir), "%s", optarg); break;
		case 'z': a_ssd = optarg; break;
		case 'n': cfg.pin = false; break;
		case 'h': kvpb_usage(stdout); return 0;
		default: kvpb_usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		kvpb_usage(stderr);
		return 2;
	}
	/* defaults: full, then --quick */
	cfg.rounds = cfg.quick ? 5 : 7;
	cfg.ws = cfg.quick ? 64ull << 20 : 256ull << 20;
	cfg.passes = cfg.quick ? 1 : 2;
	cfg.nix = cfg.quick ? 1 : 2;
	cfg.ix_entries[0] = 50000;  /* 65,536 slots: ~21 MiB, about the L3 */
	cfg.ix_entries[1] = 200000; /* 262,144 slots: ~82 MiB, beyond it */
	cfg.prefix_batches = cfg.quick ? 40 : 200;
	cfg.exists_ops = cfg.quick ? 200000 : 1000000;
	cfg.rtt_ops = cfg.quick ? 10000 : 50000;
	cfg.nssd = 1;
	cfg.ssd_sizes[0] = 1u << 20;
	if (!cfg.quick) {
		cfg.nssd = 3;
		cfg.ssd_sizes[0] = 64u << 10;
		cfg.ssd_sizes[1] = 1u << 20;
		cfg.ssd_sizes[2] = 4u << 20;
	}
	cfg.ssd_bytes = cfg.quick ? 64ull << 20 : 256ull << 20;
	cfg.nsizes = 3;
	cfg.sizes[0] = 64u << 10;
	cfg.sizes[1] = 1u << 20;
	cfg.sizes[2] = 4u << 20;
	cfg.nprocs = 2;
	cfg.procs[0] = 1;
	cfg.procs[1] = 2;
	cfg.sys_mask = (1u << KVPB_NSYS) - 1;
	cfg.sec_mask = (1u << SEC_GET) | (1u << SEC_MIXED) | (1u << SEC_PREFIX) | (1u << SEC_SSD) |
		       (1u << SEC_RTT);
	if (rounds)
		cfg.rounds = rounds;
	if (a_ws)
		cfg.ws = a_ws;
	cfg.batch = batch;
	if ((a_sizes && kvpb_parse_u64s(a_sizes, cfg.sizes, KVPB_MAX_SIZES, &cfg.nsizes, true)) ||
	    (a_ssd && kvpb_parse_u64s(a_ssd, cfg.ssd_sizes, KVPB_MAX_SIZES, &cfg.nssd, true)) ||
	    (a_procs && kvpb_parse_u64s(a_procs, u64, 8, &n, false)) ||
	    (a_sys && kvpb_parse_list(a_sys, kvpb_sys_name, KVPB_NSYS, &cfg.sys_mask)) ||
	    (a_sec && kvpb_parse_list(a_sec, secs, 5, &mask)) ||
	    cfg.rounds < 1 || cfg.rounds > 100 || batch > KVPB_RPC_MAXN / 2) {
		kvpb_usage(stderr);
		return 2;
	}
	if (a_procs) {
		cfg.nprocs = n;
		for (k = 0; k < n; k++)
			cfg.procs[k] = u64[k] < KVPB_MAX_PROCS ? (unsigned)u64[k] : KVPB_MAX_PROCS;
	}
	if (a_sec) {
		cfg.sec_mask = 0;
		for (k = 0; k < 5; k++)
			if (mask & (1u << k))
				cfg.sec_mask |= 1u << sec_bit[k];
	}
	cfg.nproc = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	cfg.nworkers = cfg.procs[cfg.nprocs - 1];
	if (cfg.nworkers < cfg.nproc && kvpb_sys_on(SYS_MEMCPY))
		cfg.nworkers = cfg.nproc < KVPB_MAX_PROCS ? cfg.nproc : KVPB_MAX_PROCS;
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);

	ctl = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ctl == MAP_FAILED)
		return 1;
	memset(ctl, 0, sizeof(*ctl));
	printf("{\"config\": {\"mode\": \"%s\", \"rounds\": %u, \"ws_bytes\": %llu, "
	       "\"passes\": %u, \"nproc\": %u, \"pinned\": %s, \"ssd_dir\": \"%s\", "
	       "\"ssd_bytes\": %llu, \"prefix_batches\": %u, \"rtt_ops\": %llu, "
	       "\"rtt_size\": %u, \"rtt_keys\": %u, \"sizes\": [",
	       cfg.quick ? "quick" : "full", cfg.rounds, (unsigned long long)cfg.ws,
	       cfg.passes, cfg.nproc, cfg.pin ? "true" : "false", cfg.ssd_dir,
	       (unsigned long long)cfg.ssd_bytes, cfg.prefix_batches,
	       (unsigned long long)cfg.rtt_ops, KVPB_RTT_SIZE, KVPB_RTT_KEYS);
	for (s = 0; s < cfg.nsizes; s++)
		printf("%s%llu", s ? ", " : "", (unsigned long long)cfg.sizes[s]);
	printf("], \"procs\": [");
	for (k = 0; k < cfg.nprocs; k++)
		printf("%s%u", k ? ", " : "", cfg.procs[k]);
	printf("], \"systems\": [");
	for (k = 0, n = 0; k < KVPB_NSYS; k++)
		if (kvpb_sys_on(k))
			printf("%s\"%s\"", n++ ? ", " : "", kvpb_sys_name[k]);
	printf("]}}\n");
	fflush(stdout);
	kvpb_log("bench_peers: %s mode, %u rounds + 1 warm-up, %llu MiB per value size, "
		 "%u CPUs, workers %s\n", cfg.quick ? "quick" : "full", cfg.rounds,
		 (unsigned long long)(cfg.ws >> 20), cfg.nproc,
		 cfg.pin ? "pinned (worker w on CPU w mod nproc)" : "not pinned");

	/* the value sets and the memcpy regions (tmpfs), before the fork */
	for (s = 0; s < cfg.nsizes; s++) {
		struct kvpb_vset *v = &kvpb_vs[s];
		uint64_t i;

		v->size = cfg.sizes[s];
		v->n = cfg.ws / v->size < 4 ? 4 : cfg.ws / v->size;
		v->batch = cfg.batch ? cfg.batch : (unsigned)((1u << 20) / v->size);
		v->batch = v->batch > 16 ? 16 : v->batch < 1 ? 1 : v->batch;
		v->keys = malloc(v->n * KVPB_KLEN);
		v->mc = kvpb_sys_on(SYS_MEMCPY) ? kvpb_shm_region(v->n * v->size) : NULL;
		if (!v->keys || (kvpb_sys_on(SYS_MEMCPY) && !v->mc)) {
			kvpb_log("bench_peers: out of memory for the value sets\n");
			return 1;
		}
		if (!v->mc)
			v->mc = malloc(v->n * v->size); /* the fill writes it */
		for (i = 0; i < v->n; i++)
			kvpb_key(v->keys + i * KVPB_KLEN, KVPB_TAG_GET + s, i);
	}
	if (kvpb_sec_on(SEC_RTT)) {
		struct kvpb_vset *v = &kvpb_vs[KVPB_RTT];
		uint64_t i;

		v->size = KVPB_RTT_SIZE;
		v->n = KVPB_RTT_KEYS;
		v->batch = 1;
		v->keys = malloc(v->n * KVPB_KLEN);
		v->mc = kvpb_sys_on(SYS_MEMCPY) ? kvpb_shm_region(v->n * v->size)
						: malloc(v->n * v->size);
		if (!v->keys || !v->mc) {
			kvpb_log("bench_peers: out of memory for the rtt set\n");
			return 1;
		}
		for (i = 0; i < v->n; i++)
			kvpb_key(v->keys + i * KVPB_KLEN, KVPB_TAG_GET + KVPB_RTT, i);
	}
	for (k = 0; k < cfg.nix; k++) {
		uint64_t e = cfg.ix_entries[k];

		kvpb_ixcap[k] = kvpb_pow2_at_least(e + e / 4) * 9 / 10;
		kvpb_ixkeys[k] = mmap(NULL, kvpb_ixcap[k] * KVPB_KLEN, PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (kvpb_ixkeys[k] == MAP_FAILED)
			return 1;
	}
	if (kvpb_workers_start()) {
		kvpb_log("bench_peers: cannot start the workers\n");
		return 1;
	}

	/* the servers (before kvpool, so that they inherit nothing of it) */
	if (kvpb_rpc_on() && (kvpb_rpc_start() ||
			      kvpb_rpc_connect(&kvpb_prpc, kvpb_prpc_half(), NULL, 0))) {
		rc = 1;
		goto out;
	}
	if (kvpb_sys_on(SYS_REDIS) && kvpb_redis_start()) {
		rc = 1;
		goto out;
	}
	if (kvpb_sys_on(SYS_LMDB)) {
		uint64_t total = 0;

		for (s = 0; s <= KVPB_RTT; s++)
			total += kvpb_vs[s].n * kvpb_vs[s].size;
		snprintf(ctl->lmdb_dir, sizeof(ctl->lmdb_dir), "/dev/shm/kvpb-lmdb.%d",
			 (int)getpid());
		kvpb_rm_rf(ctl->lmdb_dir);
		ctl->lmdb_mapsize = 4 * total + (1ull << 30);
		if (mkdir(ctl->lmdb_dir, 0700) || kvpb_lmdb_open(&kvpb_penv, &kvpb_pdbi)) {
			rc = 1;
			goto out;
		}
	}
	if (cfg.sec_mask & ((1u << SEC_GET) | (1u << SEC_MIXED) | (1u << SEC_RTT))) {
		uint64_t dram = 64ull << 20;

		for (s = 0; s <= KVPB_RTT; s++) /* the sets + one mixed round */
			dram += kvpb_vs[s].n * kvpb_vs[s].size;
		dram += (uint64_t)cfg.procs[cfg.nprocs - 1] * (cfg.ws / 2 + 16 * cfg.sizes[cfg.nsizes - 1]);
		if (kvpb_sys_on(SYS_KVPOOL) && kvpb_pool_start(0, dram, "16K", 65536)) {
			rc = 1;
			goto out;
		}
		t = kvpb_now_s();
		if (kvpb_fill_values()) {
			rc = 1;
			goto out;
		}
		kvpb_info("fill", "value sets put into every system in %.1f s",
			  kvpb_now_s() - t);
	}
	if (cfg.sec_mask & (1u << SEC_PREFIX)) {
		for (k = 0; k < cfg.nix; k++)
			if (kvpb_fill_index(k)) {
				rc = 1;
				goto out;
			}
	}
	for (k = 0; k <= cfg.rounds; k++) {
		double tr = kvpb_now_s();

		if (kvpb_run_values(k) || (kvpb_sec_on(SEC_RTT) && kvpb_run_rtt(k)) ||
		    ((cfg.sec_mask & (1u << SEC_PREFIX)) && kvpb_run_index(k))) {
			rc = 1;
			goto out;
		}
		if (k && (cfg.sec_mask & (1u << SEC_SSD)))
			kvpb_run_ssd(k);
		kvpb_log("bench_peers: round %u%s done in %.1f s\n", k, k ? "" : " (warm-up)",
			 kvpb_now_s() - tr);
	}
out:
	kvpb_workers_stop();
	kvpb_cleanup();
	kvpb_info("elapsed", "%.1f s", kvpb_now_s() - t0);
	kvpb_log("bench_peers: %s\n", rc ? "failed" : "done");
	return rc;
}
