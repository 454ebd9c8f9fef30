#!/usr/bin/env bash
# Install the real monitoring components the alert/dashboard tests run against:
# Prometheus 2.42 (with promtool) and Alertmanager 0.25 (with amtool), from Debian.
# Idempotent: apt-get install is a no-op when they are already there.
set -euo pipefail
apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus prometheus-alertmanager
