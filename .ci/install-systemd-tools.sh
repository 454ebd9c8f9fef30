#!/usr/bin/env bash
# Install systemd-analyze, which tests/test_systemd.py runs to check systemd/spectax.service
# offline (no systemd needs to run). Idempotent: does nothing when it is already there.
set -euo pipefail
if command -v systemd-analyze >/dev/null 2>&1; then
    exit 0
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd
