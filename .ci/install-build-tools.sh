#!/usr/bin/env bash
# Install cmake and a C++ compiler, which tests/live_llamacpp/setup.sh needs to build
# llama-server from source (the live llama.cpp tier). Idempotent: does nothing when they
# are already there.
set -euo pipefail
if command -v cmake >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1; then
    exit 0
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cmake g++ make
