/* SPDX-License-Identifier: MIT */
/*
 * options.h - kvpoold's flags, declared once (agent/options.c): the table
 * there generates the parsing (getopt_long's array, each value's checks
 * and its error message), the defaults, --help, --print-config (the
 * commented config 'ninja install' writes) and --synopsis (the README's
 * "Agent flags" block, checked by tests/agent/test_options_doc.sh).
 */
#ifndef KVP_OPTIONS_H
#define KVP_OPTIONS_H

#include "agent/agent_int.h"

/*
 * Fill cfg with every flag's default, then parse argv into it.  Returns
 * -1 (go on and serve), or the exit status once what was asked is said:
 * 0 for --help, --print-config and --synopsis (printed on stdout), 2 for
 * a bad flag or value (said on stderr, with what the flag takes).  Defaults the agent computes (--dram,
 * --index-entries, --numa, ...) are left 0 (or KVP_NUMA_DEFAULT) for
 * main to compute.  Context: main, before anything else.
 */
int kvp_opts_parse(int argc, char **argv, struct kvp_agent_cfg *cfg);

/* The table's default of flag NAME (a number; 0 if it has none). */
uint64_t kvp_opts_default(const char *name);

#endif
