#!/usr/bin/env bash
# install.sh - install (if needed) the headless browser of the monitor's page tests:
#   Debian's chromium and chromium-driver (selenium drives them; tests/integration/browser/test_monitor_browser.py).
# Idempotent and quick when both are present; needs root to install (apt-get), like
# tests/cluster/start.sh, and uses the same retries. BROWSER_INSTALL=0: never call apt-get
# (fail if a package is missing). Progress goes to stderr.
set -euo pipefail
log() { echo "[browser/install.sh] $*" >&2; }
PKGS=(chromium chromium-driver)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
((${#missing[@]})) || exit 0
[[ ${BROWSER_INSTALL:-1} == 1 ]] || { log "missing packages: ${missing[*]} (BROWSER_INSTALL=0)"; exit 1; }
[[ $(id -u) -eq 0 ]] || { log "missing packages: ${missing[*]} (installing them needs root)"; exit 1; }
log "installing: ${missing[*]}"
apt_log=$(mktemp /tmp/launchers-browser-apt.XXXXXX)
ok=0
for attempt in 1 2 3; do
  if DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       "${missing[@]}" >"$apt_log" 2>&1; then ok=1; break; fi
  log "apt-get attempt $attempt failed (see $apt_log); retrying"; sleep $((attempt * 5))
done
[[ $ok == 1 ]] || { tail -20 "$apt_log" >&2; log "apt-get install failed"; exit 1; }
rm -f "$apt_log"
log "installed: ${missing[*]}"
