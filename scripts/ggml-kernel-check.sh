#!/usr/bin/env bash
# Check the quantized matmul kernels of the llama.cpp that set-up installed (patches/llama.cpp/0005:
# Q4_K and Q6_K weights times 2-15 and 2-12 rows; 0006: Q8_0, Q5_0 and Q4_0 times 2-16 rows)
# against an exact reference, with the bound derived in scripts/ggml-kernel-check.cpp. Builds that program against the venv's libggml (headers from
# the cached llama-cpp-python sdist), runs it, exits as it does (0: every case within bound).
# On an AVX-512 machine, run it under scripts/as-avx2.sh from a checkout whose venv holds the
# AVX2 build to check the AVX2 kernels.
#   PYTHON   the venv's python (default .venv/bin/python)   THREADS  (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-.venv/bin/python}"
version="${LLAMA_VERSION:-0.3.36}"
lib=$("$py" -c 'import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), "lib"))')
sdist=""
for root in "${XDG_CACHE_HOME:-$HOME/.cache}/specchat" "$HOME/.cache/specchat"; do
  for f in "$root/llama-server/$version/src/llama_cpp_python-$version.tar.gz" "$root/llama-cpp-python/$version/llama_cpp_python-$version.tar.gz"; do
    [ -f "$f" ] && { sdist=$f; break 2; }
  done
done
[ -n "$sdist" ] || { echo "ggml-kernel-check: no llama-cpp-python $version sdist in the cache (make setup fetches it)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ggml-kernel-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -xzf "$sdist" -C "$work" "llama_cpp_python-$version/vendor/llama.cpp/ggml/include"
"${CXX:-c++}" -O2 -std=c++17 -I"$work/llama_cpp_python-$version/vendor/llama.cpp/ggml/include" \
  scripts/ggml-kernel-check.cpp -L"$lib" -lggml -lggml-cpu -lggml-base -Wl,-rpath,"$lib" -o "$work/ggml-kernel-check"
"$work/ggml-kernel-check" "${THREADS:-2}"
