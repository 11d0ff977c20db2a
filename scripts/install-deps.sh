#!/usr/bin/env bash
# install-deps.sh — install what building and testing nextflash needs, only what is missing.
#
# Debian packages: a C toolchain, Criterion (C tests), PCRE2 (tokenizer regex), Jansson (JSON), clang +
# libFuzzer (fuzz targets), pkg-config, libedit (nf chat line editing). Python test tools from PyPI: pytest, numpy, gguf (the cross-check of
# our GGUF and quantization code). Torch and transformers are NOT needed: reference outputs are committed.
set -euo pipefail

need_apt=()
have_pc() { pkg-config --exists "$1" 2>/dev/null; }
command -v cc >/dev/null       || need_apt+=(build-essential)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v clang >/dev/null    || need_apt+=(clang)
have_pc criterion              || need_apt+=(libcriterion-dev)
have_pc libpcre2-8             || need_apt+=(libpcre2-dev)
have_pc jansson                || need_apt+=(libjansson-dev)
have_pc libmicrohttpd          || need_apt+=(libmicrohttpd-dev)
have_pc libedit                || need_apt+=(libedit-dev)   # line editing in `nf chat` (BSD licence)
# libFuzzer's runtime ships in libclang-rt-<ver>-dev on Debian bookworm.
if command -v clang >/dev/null; then
  if ! echo 'int LLVMFuzzerTestOneInput(const char*d,unsigned long n){(void)d;(void)n;return 0;}' \
       | clang -x c -fsanitize=fuzzer - -o /tmp/nf-fuzz-probe 2>/dev/null; then
    v=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
    need_apt+=("libclang-rt-${v:-14}-dev")
  fi
  rm -f /tmp/nf-fuzz-probe
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

PY=${PYTHON:-python3}
need_pip=()
$PY -c 'import pytest' 2>/dev/null || need_pip+=(pytest)
$PY -c 'import numpy' 2>/dev/null  || need_pip+=(numpy)
$PY -c 'import gguf' 2>/dev/null   || need_pip+=(gguf)
$PY -c 'import anthropic' 2>/dev/null || need_pip+=(anthropic)   # nf-server tests drive the official SDKs
$PY -c 'import openai' 2>/dev/null || need_pip+=(openai)
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "install-deps: pip install ${need_pip[*]}"
  $PY -m pip install -q "${need_pip[@]}" || $PY -m pip install -q --break-system-packages "${need_pip[@]}"
fi
echo "install-deps: ok"
