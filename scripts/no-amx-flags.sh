#!/usr/bin/env bash
# Prints the compiler flags that keep llama.cpp's AMX kernels out of a GGML_NATIVE build on
# a CPU that has AMX (nothing elsewhere); build-llama-cpp-python.sh and build-llama-server.sh
# both compile with them.
#
# Why: -march=native turns on ggml's AMX extra buffer type, which repacks Q4_0, Q4_1, Q8_0 and
# the K-quants and runs their matrix products on AMX tiles. CI's gpu-check --cpu crashed in
# exactly the steps that run llama.cpp on such weights (a segfault in the llama.cpp test on the
# embedded Q4_1 file, the Q4_K_M synthetic plan) while its BF16, transformers and NF4 steps
# passed, and none of it happens on the AVX-512 and AVX2 machines here: the pattern of
# llama.cpp issue 20824 ("segfault in ggml_backend_amx_mul_mat", machine-dependent, closed
# unfixed), for which dspy dropped the AMX variant from its CI (pull request 10079). The AMX
# machines seen here are Firecracker VMs. The default model runs in BF16, which AMX never
# serves, so leaving AMX out costs the default nothing; quantised weights keep the AVX-512
# kernels. Explicit -mno-* flags win over -march=native whatever their order (gcc and clang).
# The build caches' keys change only on AMX machines.
set -euo pipefail
# SPECCHAT_CPUINFO: another cpuinfo file to read (tests)
if [ "$(uname -m)" = x86_64 ] && grep -m1 '^flags' "${SPECCHAT_CPUINFO:-/proc/cpuinfo}" 2>/dev/null | grep -qw amx_tile; then
  echo "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
