#!/usr/bin/env bash
# The whole test suite, from a fresh clone, as root on Debian 12:
#   installs the package with its test tools (selenium among them) and headless Chromium
#   (tests/browser/install.sh), starts the real Slurm cluster and sshd (tests/cluster/start.sh),
#   runs ruff, lint-imports, mypy and pytest, and stops what it started.
# Most tests wait on Slurm, sshd or a loopback server rather than on the CPU, so pytest runs them
# in parallel workers (pytest-xdist); tests marked `timing` assert wall-clock bounds and run
# alone afterwards. Extra arguments go to one plain pytest run instead (docs/testing.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CLUSTER_DIR=${CLUSTER_DIR:-/tmp/slurm-sandbox}
WORKERS=${PYTEST_WORKERS:-6}
t0=$SECONDS
stage() { echo "[run.sh $((SECONDS - t0))s] $*" >&2; }
# Run the real interpreter, not a version manager's shim: pyenv's shim rehashes after every
# `pip install` and fails the install when a stale lock file is left in its shims directory.
# Console scripts installed here (launchers, lint-imports) are found in the interpreter's bin.
PY=$(python3 -c 'import sys; print(sys.executable)')
# Python's bytecode caches are written even where the environment turns them off: every
# parallel worker imports every test module, and pytest reuses its assertion-rewritten modules
# only from __pycache__ (git-ignored); without it each worker spends 6 s of CPU rewriting them.
unset PYTHONDONTWRITEBYTECODE
export PATH="$(dirname "$PY"):$PATH"
"$PY" -m pip install --quiet --disable-pip-version-check -e '.[test]'
# Where login shells run `pyenv rehash` (root's .bashrc here: SSH commands, job scripts), a shell
# killed mid-rehash (a cancelled job, a killed SSH session) leaves pyenv's lock file behind and
# every later login shell waits 60 s for it: wait 5 s at most, and clear a lock older than a minute.
export PYENV_REHASH_TIMEOUT=${PYENV_REHASH_TIMEOUT:-5}
if [[ -n ${PYENV_ROOT:-} ]]; then find "$PYENV_ROOT/shims" -maxdepth 1 -name .pyenv-shim -mmin +1 -delete 2>/dev/null || true; fi
stage "installed"
started=0
mypy_pid=
collect_pid=
cleanup() {
  [[ -n $mypy_pid ]] && kill "$mypy_pid" 2>/dev/null || true
  [[ -n $collect_pid ]] && kill "$collect_pid" 2>/dev/null || true
  if [[ $started == 1 && ${KEEP_CLUSTER:-0} != 1 ]]; then
    bash tests/cluster/stop.sh >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
# ruff, lint-imports (the layer contract in pyproject.toml) and mypy need no cluster: mypy runs
# while the cluster starts
"$PY" -m ruff check src tests benchmarks
"$PY" -m ruff format --check src tests benchmarks examples
lint-imports --no-cache >/tmp/launchers-lint-imports.log 2>&1 || { cat /tmp/launchers-lint-imports.log; exit 1; }
"$PY" -m mypy >/tmp/launchers-mypy.log 2>&1 &
mypy_pid=$!
# one collection fills those caches while the cluster starts (its errors show in the real run)
if [[ $# -eq 0 ]]; then
  "$PY" -m pytest -q --collect-only -p no:cacheprovider >/dev/null 2>&1 &
  collect_pid=$!
fi
# the monitor's page tests drive a headless Chromium (Debian's chromium and chromium-driver)
bash tests/browser/install.sh
# the environment tests load real environment modules (Debian's lmod)
bash tests/cluster/lmod.sh
bash tests/cluster/start.sh >/tmp/launchers-cluster.env
# stop on exit only what this run started (a reused, already running cluster is left alone)
grep -q '^# start.sh: reused' /tmp/launchers-cluster.env || started=1
stage "cluster up"
set -a; source "$CLUSTER_DIR/env.sh"; set +a
if ! wait "$mypy_pid"; then mypy_pid=; cat /tmp/launchers-mypy.log; exit 1; fi
mypy_pid=
cat /tmp/launchers-mypy.log
stage "ruff, lint-imports and mypy clean"
if [[ -n $collect_pid ]]; then wait "$collect_pid" || true; collect_pid=; fi
if [[ $# -gt 0 ]]; then
  "$PY" -m pytest -q "$@"
  exit
fi
"$PY" -m pytest -q -n "$WORKERS" --dist loadgroup -m "not timing"
stage "parallel tests passed"
"$PY" -m pytest -q -m timing
stage "timing tests passed"
