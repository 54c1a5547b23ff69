/* SPDX-License-Identifier: MIT */
/*
 * metrics_http.c - the agent's Prometheus endpoint: GET /metrics answers
 * the text exposition format 0.0.4 (agent/metrics.c renders it).
 *
 * libmicrohttpd serves it from its own internal thread
 * (MHD_USE_INTERNAL_POLLING_THREAD): a scrape never runs on, and never
 * waits for, the tier thread or the reaper.  It reads the segment through
 * a mapping of its own that is read only (PROT_READ), so a scrape cannot
 * write shared memory even by mistake, and it takes no lock.
 *
 * --metrics-addr HOST:PORT (default 127.0.0.1:9464; [::1]:PORT for IPv6;
 * port 0 picks a free port; "off" disables).  The bound port is published
 * in the header (h_metrics_port) for tools and tests.  A default address
 * that is taken (another pool's agent on this node) only disables the
 * endpoint with a warning; an address given on the command line that
 * cannot be bound stops the agent.
 */
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>

#include "agent/agent_int.h"

struct kvp_http {
	struct MHD_Daemon *d;
	struct kvp_seg ro;          /* read-only mapping of the segment */
	struct kvp_shm_header *hdr; /* the agent's own (writable) header */
	/* the agent's name of it (validated), not h_pool */
	char pool[KVP_POOL_NAME_MAX];
};

/* never written: MHD sends MHD_RESPMEM_PERSISTENT buffers as they are */
static char kvp_http_index[] =
	"<html><head><title>kvpoold</title></head><body><h1>kvpoold</h1>"
	"<p><a href=\"/metrics\">/metrics</a></p></body></html>\n";

static enum MHD_Result
kvp_http_reply(struct MHD_Connection *conn, unsigned code, const char *type,
	       void *buf, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, buf, mode);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

/* Runs on libmicrohttpd's thread: reads the read-only mapping only. */
static enum MHD_Result
kvp_http_handler(void *cls, struct MHD_Connection *conn, const char *url,
		 const char *method, const char *version,
		 const char *upload_data, size_t *upload_size, void **req_ctx)
{
	struct kvp_http *h = cls;
	static char nf[] = "not found: try /metrics\n", na[] = "GET only\n";
	struct kvp_metrics *m;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int rc;

	(void)version;
	(void)upload_data;
	(void)req_ctx;
	if (strcmp(method, MHD_HTTP_METHOD_GET) &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD)) {
		*upload_size = 0;
		return kvp_http_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
				      "text/plain", na, sizeof(na) - 1,
				      MHD_RESPMEM_PERSISTENT);
	}
	if (!strcmp(url, "/"))
		return kvp_http_reply(conn, MHD_HTTP_OK, "text/html",
				      kvp_http_index,
				      sizeof(kvp_http_index) - 1,
				      MHD_RESPMEM_PERSISTENT);
	if (strcmp(url, "/metrics"))
		return kvp_http_reply(conn, MHD_HTTP_NOT_FOUND, "text/plain",
				      nf, sizeof(nf) - 1,
				      MHD_RESPMEM_PERSISTENT);
	m = malloc(sizeof(*m));
	f = open_memstream(&buf, &len);
	if (!m || !f) {
		free(m);
		if (f)
			fclose(f);
		free(buf);
		return MHD_NO;
	}
	kvp_metrics_collect(&h->ro, h->pool, m);
	rc = kvp_metrics_prom(m, f);
	free(m);
	if (fclose(f) || rc) {
		free(buf);
		return MHD_NO;
	}
	/* MHD frees buf (malloc'd by open_memstream) after sending it */
	return kvp_http_reply(conn, MHD_HTTP_OK,
			      "text/plain; version=0.0.4; charset=utf-8", buf,
			      len, MHD_RESPMEM_MUST_FREE);
}

/* fmt is libmicrohttpd's own format; the attribute tells clang's
 * -Wformat-nonliteral so (gcc does not warn on a va_list format) */
__attribute__((format(printf, 2, 0))) static void
kvp_http_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	kvp_log(KVP_LOG_WARN, "metrics", "%s", line);
}

/* "HOST:PORT", "[V6]:PORT" -> host, port (in place). */
static int
kvp_http_split(char *addr, char **host, char **port)
{
	char *colon = strrchr(addr, ':');

	if (!colon || colon == addr || !colon[1])
		return -EINVAL;
	*colon = '\0';
	*port = colon + 1;
	*host = addr;
	if (addr[0] == '[') {
		size_t n = strlen(addr);
		if (n < 3 || addr[n - 1] != ']')
			return -EINVAL;
		addr[n - 1] = '\0';
		*host = addr + 1;
	}
	return 0;
}

/*
 * Start the endpoint (main thread, before the agent announces itself).
 * Returns 0 (serving, or disabled) or a negative errno when an address
 * given on the command line cannot be served.
 */
int
kvp_metrics_http_start_agent(struct kvp_agent *a)
{
	struct kvp_agent_cfg *cfg = &a->cfg;
	struct addrinfo hints, *ai = NULL;
	char addr[sizeof(cfg->metrics_addr)], *host, *port, msg[512];
	const union MHD_DaemonInfo *di;
	struct kvp_http *h;
	sigset_t block, old;
	int rc;

	/* relaxed: for tools */
	kvp_store_relaxed(&a->seg.hdr->h_metrics_port, 0);
	if (!cfg->metrics_addr[0] || !strcmp(cfg->metrics_addr, "off"))
		return 0;
	snprintf(addr, sizeof(addr), "%s", cfg->metrics_addr);
	if (kvp_http_split(addr, &host, &port)) {
		kvp_log(KVP_LOG_ERROR, "metrics",
			"bad --metrics-addr '%s' (HOST:PORT, "
			"[V6]:PORT or off)",
			cfg->metrics_addr);
		return -EINVAL;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc || !ai) {
		kvp_log(KVP_LOG_ERROR, "metrics", "--metrics-addr '%s': %s",
			cfg->metrics_addr, gai_strerror(rc));
		return -EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		freeaddrinfo(ai);
		return -ENOMEM;
	}
	h->hdr = a->seg.hdr;
	snprintf(h->pool, sizeof(h->pool), "%s", cfg->pool);
	rc = kvp_seg_map(cfg->pool, false, &h->ro, msg, sizeof(msg));
	if (rc) {
		kvp_log(KVP_LOG_ERROR, "metrics",
			"cannot map the segment read only: %s", msg);
		goto err_free;
	}
	/* the server's thread takes no process signals: SIGTERM is main's */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	h->d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
			(ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
		0, NULL, NULL, kvp_http_handler, h,
		/* first */
		MHD_OPTION_EXTERNAL_LOGGER, kvp_http_log, NULL,
		MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
		64u, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	freeaddrinfo(ai);
	ai = NULL;
	if (!h->d) {
		rc = -EADDRINUSE;
		if (cfg->metrics_addr_given) {
			kvp_log(KVP_LOG_ERROR, "metrics",
				"cannot serve /metrics on %s (in use, "
				"or not an address of this host)",
				cfg->metrics_addr);
			goto err_unmap;
		}
		kvp_log(KVP_LOG_WARN, "metrics",
			"cannot serve /metrics on %s (in use?): "
			"endpoint off; give --metrics-addr HOST:PORT",
			cfg->metrics_addr);
		rc = 0;
		goto err_unmap;
	}
	di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	/* relaxed: for tools; published with the agent's pid (release) */
	kvp_store_relaxed(&a->seg.hdr->h_metrics_port, di ? di->port : 0);
	a->http = h;
	kvp_log(KVP_LOG_INFO, "metrics", "serving /metrics on %s (port %u)",
		cfg->metrics_addr, di ? (unsigned)di->port : 0u);
	return 0;

err_unmap:
	kvp__seg_unmap(&h->ro);
err_free:
	free(h);
	if (ai)
		freeaddrinfo(ai);
	return rc;
}

/* Stop serving (main thread, at SIGTERM); waits for a scrape in progress. */
void
kvp_metrics_http_stop_agent(struct kvp_agent *a)
{
	struct kvp_http *h = a->http;

	if (!h)
		return;
	MHD_stop_daemon(h->d);
	kvp_store_relaxed(&h->hdr->h_metrics_port, 0); /* relaxed: for tools */
	kvp__seg_unmap(&h->ro);
	free(h);
	a->http = NULL;
}
