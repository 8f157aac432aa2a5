#!/usr/bin/env bash
# Run a command as on an AVX2 CPU without AVX-512, on an AVX-512 machine (root, Linux):
# /proc/cpuinfo without the avx512/amx flags (a bind mount in a private mount namespace),
# torch/MKL/oneDNN capped at AVX2, and llama.cpp and llama-server built with AVX2 flags
# instead of -march=native, in a cache of their own. Every test must pass on both CPU kinds:
#   git clone . /tmp/avx2 && cd /tmp/avx2 && scripts/as-avx2.sh bash -c 'make setup && \
#     SPECCHAT_LLAMA_SERVER_DIR=$(make -s llama-server | tail -n 1) make test'
# It emulates the instruction set, not the machine: timings are this CPU's.
set -euo pipefail
export ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-$HOME/.cache}/specchat-avx2"
AV="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF"
export LLAMA_SERVER_CMAKE_ARGS="$AV" LLAMA_CMAKE_ARGS="$AV"
masked=$(mktemp)
flags=$(grep -m1 '^flags' /proc/cpuinfo | sed -E 's/ (avx512|amx)[a-z_0-9]*//g')
awk -v f="$flags" '/^flags/ {print f; next} {print}' /proc/cpuinfo > "$masked"
exec unshare -m bash -c 'mount --bind "$0" /proc/cpuinfo && exec "$@"' "$masked" "$@"
