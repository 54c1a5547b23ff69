/* SPDX-License-Identifier: MIT */
/*
 * drv_redis.c - Redis over a Unix socket: a private redis-server (no
 * persistence, no memory limit), hiredis, batches pipelined; a value is
 * copied from hiredis' reply into the worker's private buffer (hiredis
 * cannot read into a caller's buffer).  The prefix probe is 2,000
 * pipelined EXISTS.
 */
#include <sys/prctl.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>

#include "stress/peers/peers_int.h"

static redisContext *kvpb_predis; /* the parent's */
static pid_t kvpb_redis_pid = -1;
static redisContext *kvpb_wredis; /* a worker's */

static redisContext *
kvpb_redis_connect(void)
{
	redisContext *c = redisConnectUnix(kvpb_ctl->redis_sock);

	if (!c || c->err) {
		if (c)
			redisFree(c);
		return NULL;
	}
	c->reader->maxbuf = 0; /* keep the read buffer: no free per reply */
	return c;
}

/* Collect n pipelined replies; returns how many were not OK. */
static uint64_t
kvpb_redis_drain(redisContext *c, uint64_t n)
{
	uint64_t k, bad = 0;

	for (k = 0; k < n; k++) {
		redisReply *r = NULL;

		if (redisGetReply(c, (void **)&r) != REDIS_OK || !r)
			return bad + n - k;
		bad += r->type == REDIS_REPLY_ERROR;
		freeReplyObject(r);
	}
	return bad;
}

/* ---- the parent: the server and the fill ---- */

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

static void
kvpb_redis_log_path(char *log, size_t cap)
{
	snprintf(log, cap, "/tmp/kvpb-redis.%d.log", (int)getpid());
}

static int
kvpb_redis_start(void)
{
	char log[128];

	snprintf(kvpb_ctl->redis_sock, sizeof(kvpb_ctl->redis_sock),
		 "/tmp/kvpb-redis.%d.sock", (int)getpid());
	kvpb_redis_log_path(log, sizeof(log));
	unlink(kvpb_ctl->redis_sock);
	kvpb_redis_pid = fork();
	if (kvpb_redis_pid < 0)
		return -errno;
	if (kvpb_redis_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		kvpb_close_fds_but(-1);
		execlp("redis-server", "redis-server", "--port", "0",
		       "--unixsocket", kvpb_ctl->redis_sock, "--unixsocketperm",
		       "700", "--save", "", "--appendonly", "no", "--dir",
		       "/tmp", "--logfile", log, "--daemonize", "no",
		       "--maxmemory", "0", (char *)NULL);
		_exit(127);
	}
	if (kvpt_wait_until(kvpb_redis_ready, NULL, 10000) < 0) {
		kvpb_log("bench_peers: redis-server did not come up (log %s)\n",
			 log);
		return -ETIMEDOUT;
	}
	kvpb_predis = kvpb_redis_connect();
	return kvpb_predis ? 0 : -EIO;
}

static uint64_t
kvpb_redis_fill_value(const struct kvpb_vset *v, uint64_t i, const void *val)
{
	redisAppendCommand(kvpb_predis, "SET %b %b", v->keys + i * KVPB_KLEN,
			   (size_t)KVPB_KLEN, val, (size_t)v->size);
	return kvpb_redis_drain(kvpb_predis, 1);
}

/* 1,024 SETs in flight at a time. */
static uint64_t
kvpb_redis_fill_index(const unsigned char *keys, uint64_t n)
{
	unsigned char one = 1;
	uint64_t k, bad = 0;

	for (k = 0; k < n; k++) {
		redisAppendCommand(kvpb_predis, "SET %b %b",
				   keys + k * KVPB_KLEN, (size_t)KVPB_KLEN,
				   &one, (size_t)1);
		if (k % 1024 == 1023 || k + 1 == n)
			bad += kvpb_redis_drain(kvpb_predis, k % 1024 + 1);
	}
	return bad;
}

/* A worker's keys pipelined at a time. */
static void
kvpb_redis_mixed_undo(const unsigned char *keys, uint64_t nput, unsigned procs)
{
	uint64_t k;
	unsigned w;

	for (w = 0; w < procs; w++) {
		for (k = w * nput; k < (w + 1) * nput; k++)
			redisAppendCommand(kvpb_predis, "UNLINK %b",
					   keys + k * KVPB_KLEN,
					   (size_t)KVPB_KLEN);
		kvpb_redis_drain(kvpb_predis, nput);
	}
}

static void
kvpb_redis_stop(void)
{
	if (kvpb_predis)
		redisFree(kvpb_predis);
	kvpb_predis = NULL;
	if (kvpb_redis_pid > 0) {
		char log[128];

		kill(kvpb_redis_pid, SIGTERM);
		waitpid(kvpb_redis_pid, NULL, 0);
		unlink(kvpb_ctl->redis_sock);
		kvpb_redis_log_path(log, sizeof(log));
		unlink(log);
	}
	kvpb_redis_pid = -1;
}

/* ---- a worker ---- */

static int
kvpb_redis_open(struct kvpb_worker *W, unsigned pool)
{
	(void)W;
	(void)pool;
	if (!kvpb_wredis)
		kvpb_wredis = kvpb_redis_connect();
	return kvpb_wredis ? 0 : -EIO;
}

static uint64_t
kvpb_redis_get(struct kvpb_worker *W, const struct kvpb_vset *v,
	       const uint64_t *idx, unsigned m, const unsigned char **first)
{
	uint64_t sz = v->size, bad = 0;
	unsigned k;

	(void)first;
	for (k = 0; k < m; k++)
		redisAppendCommand(kvpb_wredis, "GET %b",
				   v->keys + idx[k] * KVPB_KLEN,
				   (size_t)KVPB_KLEN);
	for (k = 0; k < m; k++) {
		redisReply *r = NULL;

		if (redisGetReply(kvpb_wredis, (void **)&r) != REDIS_OK || !r) {
			bad += m - k;
			break;
		}
		if (r->type == REDIS_REPLY_STRING && r->len == sz)
			memcpy(W->dst + k * sz, r->str, sz);
		else
			bad++;
		freeReplyObject(r);
	}
	return bad;
}

static uint64_t
kvpb_redis_put(struct kvpb_worker *W, const unsigned char *keys, unsigned m,
	       uint64_t sz, uint64_t slot)
{
	uint64_t bad = 0;
	unsigned k;

	(void)slot;
	for (k = 0; k < m; k++)
		redisAppendCommand(kvpb_wredis, "SET %b %b",
				   keys + k * KVPB_KLEN, (size_t)KVPB_KLEN,
				   W->src, (size_t)sz);
	for (k = 0; k < m; k++) {
		redisReply *r = NULL;

		if (redisGetReply(kvpb_wredis, (void **)&r) != REDIS_OK || !r) {
			bad += m - k;
			break;
		}
		bad += r->type != REDIS_REPLY_STATUS;
		freeReplyObject(r);
	}
	return bad;
}

static uint64_t
kvpb_redis_prefix(struct kvpb_worker *W, unsigned ix, const unsigned char *keys,
		  uint64_t first)
{
	unsigned k, lead = 0;
	bool gap = false;

	(void)W;
	(void)ix;
	(void)first;
	for (k = 0; k < KVPB_PREFIX; k++)
		redisAppendCommand(kvpb_wredis, "EXISTS %b",
				   keys + k * KVPB_KLEN, (size_t)KVPB_KLEN);
	for (k = 0; k < KVPB_PREFIX; k++) {
		redisReply *r = NULL;

		if (redisGetReply(kvpb_wredis, (void **)&r) != REDIS_OK || !r)
			return lead;
		if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
			gap = true;
		else if (!gap)
			lead++;
		freeReplyObject(r);
	}
	return lead;
}

static void
kvpb_redis_close(void)
{
	if (kvpb_wredis)
		redisFree(kvpb_wredis);
	kvpb_wredis = NULL;
}

const struct kvpb_driver kvpb_drv_redis = {
	.name = "redis",
	.start = kvpb_redis_start,
	.fill_value = kvpb_redis_fill_value,
	.fill_index = kvpb_redis_fill_index,
	.mixed_undo = kvpb_redis_mixed_undo,
	.stop = kvpb_redis_stop,
	.open = kvpb_redis_open,
	.get = kvpb_redis_get,
	.put = kvpb_redis_put,
	.prefix = kvpb_redis_prefix,
	.close = kvpb_redis_close,
};
