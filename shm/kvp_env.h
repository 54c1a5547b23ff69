/* SPDX-License-Identifier: MIT */
/*
 * kvp_env.h - what every module may take from the program it runs in: a
 * clock and a log.  The mechanisms of tiers/ (the SSD store, the DRAM
 * allocator) use these and nothing of agent/; the log is implemented by
 * each program (agent/log.c for kvpoold and the tools: one line per
 * event, time, level, subsystem).
 */
#ifndef KVP_ENV_H
#define KVP_ENV_H

#include <stdint.h>
#include <time.h>

#ifndef KVP_INLINE
#define KVP_INLINE static inline
#endif

KVP_INLINE uint64_t
kvp_now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

enum kvp_log_level {
	KVP_LOG_DEBUG,
	KVP_LOG_INFO,
	KVP_LOG_WARN,
	KVP_LOG_ERROR
};

/* One line: time, level, subsystem, message (control bytes escaped). */
void kvp_log(enum kvp_log_level lvl, const char *subsys, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void kvp_log_set_level(enum kvp_log_level lvl);

#endif /* KVP_ENV_H */
