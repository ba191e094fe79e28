#!/usr/bin/env bash
# The whole test suite, from a fresh clone, as root on Debian 12:
#   installs the package with its test tools, starts the real Slurm cluster and sshd
#   (tests/cluster/start.sh), runs pytest, and stops what it started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CLUSTER_DIR=${CLUSTER_DIR:-/tmp/slurm-sandbox}
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
started=0
cleanup() {
  if [[ $started == 1 && ${KEEP_CLUSTER:-0} != 1 ]]; then
    bash tests/cluster/stop.sh >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
bash tests/cluster/start.sh >/tmp/launchers-cluster.env
# stop on exit only what this run started (a reused, already running cluster is left alone)
grep -q '^# start.sh: reused' /tmp/launchers-cluster.env || started=1
set -a; source "$CLUSTER_DIR/env.sh"; set +a
python3 -m ruff check src tests
python3 -m mypy
python3 -m pytest -q "$@"
