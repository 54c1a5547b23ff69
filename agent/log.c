/* SPDX-License-Identifier: MIT */
/*
 * log.c - one line per event: UTC time, level (DEBUG, INFO, WARN, ERROR),
 * subsystem (agent, shm, dram, ssd, io, reaper, metrics), message.  A
 * normal run logs INFO and, for conditions an operator may act on, WARN;
 * ERROR means the agent could not do what it was asked (and usually stops).
 */
#include <ctype.h>
#include <stdio.h>
#include <sys/time.h>

#include "agent/agent_int.h"

static enum kvp_log_level kvp_log_min = KVP_LOG_INFO;

void
kvp_log_set_level(enum kvp_log_level lvl)
{
	kvp_log_min = lvl;
}

void
kvp_log(enum kvp_log_level lvl, const char *subsys, const char *fmt, ...)
{
	static const char *const names[] = { "DEBUG", "INFO", "WARN", "ERROR" };
	char line[1024], ts[32], *p;
	struct timeval tv;
	struct tm tm;
	va_list ap;
	int n;

	if (lvl < kvp_log_min)
		return;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	n = snprintf(line, sizeof(line), "%s.%03ldZ %-5s %s: ", ts,
		     (long)(tv.tv_usec / 1000), names[lvl], subsys);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* one line per event, whatever the message carried (a library's
	 * text, a path): control characters become spaces */
	for (p = line + n; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
	fprintf(stderr, "%s\n", line);
}

/* "512M", "8G", "4096", "64K": binary units. */
int
kvp_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (toupper((unsigned char)*end)) {
	case '\0':
		break;
	case 'K':
		mul = 1ull << 10;
		end++;
		break;
	case 'M':
		mul = 1ull << 20;
		end++;
		break;
	case 'G':
		mul = 1ull << 30;
		end++;
		break;
	case 'T':
		mul = 1ull << 40;
		end++;
		break;
	default:
		return -EINVAL;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	if (*end || (v && mul > UINT64_MAX / v))
		return -EINVAL;
	*out = v * mul;
	return 0;
}
