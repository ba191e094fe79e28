#!/usr/bin/env bash
# lmod.sh - install (if needed) Lmod, the environment-module system of the environment tests
#   (Debian's lmod; tests/integration/slurm/test_environment_real.py writes its own modulefiles). Idempotent and
#   quick when present; needs root to install (apt-get), like tests/browser/install.sh, with the
#   same retries. LMOD_INSTALL=0: never call apt-get (fail if it is missing). Progress on stderr.
set -euo pipefail
log() { echo "[cluster/lmod.sh] $*" >&2; }
dpkg-query -W -f='${Status}' lmod 2>/dev/null | grep -q 'install ok installed' && exit 0
[[ ${LMOD_INSTALL:-1} == 1 ]] || { log "lmod is not installed (LMOD_INSTALL=0)"; exit 1; }
[[ $(id -u) -eq 0 ]] || { log "lmod is not installed (installing it needs root)"; exit 1; }
log "installing lmod"
apt_log=$(mktemp /tmp/launchers-lmod-apt.XXXXXX)
ok=0
for attempt in 1 2 3; do
  if DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       lmod >"$apt_log" 2>&1; then ok=1; break; fi
  log "apt-get attempt $attempt failed (see $apt_log); retrying"; sleep $((attempt * 5))
done
[[ $ok == 1 ]] || { tail -20 "$apt_log" >&2; log "apt-get install failed"; exit 1; }
rm -f "$apt_log"
log "installed lmod"
