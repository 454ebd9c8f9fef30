#!/usr/bin/env bash
# Install headless Chromium: tests/test_report.py opens the HTML cost report in it
# (no console errors) and saves a screenshot under artifacts/. Idempotent.
set -euo pipefail
if command -v chromium >/dev/null; then
    echo "chromium already installed: $(chromium --version 2>/dev/null || true)"
    exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
