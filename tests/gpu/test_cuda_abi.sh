#!/bin/sh
# tests/gpu/test_cuda_abi.sh - tiers/kvp_cuda.h's ABI slice against the
# toolkit's cuda_runtime_api.h (tests/gpu/test_cuda_abi.c); SKIP (77)
# where no CUDA headers are installed.
set -u
cd "$(dirname "$0")/../.." || exit 2
inc=
for d in ${CUDA_HOME:+"$CUDA_HOME/include"} \
	$(command -v nvcc >/dev/null 2>&1 && echo "$(dirname "$(dirname "$(command -v nvcc)")")/include") \
	/usr/local/cuda/include /usr/include; do
	if [ -f "$d/cuda_runtime_api.h" ]; then inc=$d; break; fi
done
[ -n "$inc" ] || { echo "SKIP no CUDA: cuda_runtime_api.h not found"; exit 77; }
grep -h "define CUDART_VERSION" "$inc/cuda_runtime_api.h" || true
${KVP_CC:-cc} -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I. -I"$inc" \
	-fsyntax-only tests/gpu/test_cuda_abi.c || { echo "FAIL: tiers/kvp_cuda.h differs from $inc"; exit 1; }
echo "tiers/kvp_cuda.h matches $inc/cuda_runtime_api.h"
