#!/usr/bin/env bash
# CI entry point of the e2e suite: builds (or reuses from the cache) the upstream binaries, then
# runs every e2e test against a local control plane. Exits non-zero if a build fails, if the
# cluster cannot start, or if any e2e test fails or none ran - the suite never skips silently.
#
# usage: e2e/ci.sh [extra pytest args...]
#   BERTH_E2E_CACHE       binary cache (default ~/.cache/berth-e2e); keep it between CI runs
#   BERTH_E2E_COMPONENTS  what to build (default: all = kubernetes etcd kwok kubectl kueue volcano helm)
#   BERTH_E2E_SKIP_NEWEST=1  skip the run on KUBERNETES_NEWEST_VERSION (versions.env)
set -euo pipefail
cd "$(dirname "$0")/.."

logdir="${BERTH_E2E_LOG_DIR:-${TMPDIR:-/tmp}/berth-e2e-logs}"
mkdir -p "$logdir"
start=$SECONDS

echo "== e2e: build upstream binaries (${BERTH_E2E_COMPONENTS:-all}); log: $logdir/build.log"
# shellcheck disable=SC2086
if ! e2e/build.sh ${BERTH_E2E_COMPONENTS:-all} > "$logdir/build.log" 2>&1; then
    tail -n 60 "$logdir/build.log"
    echo "e2e: build failed after $((SECONDS - start))s (full log: $logdir/build.log)" >&2
    exit 1
fi
grep '^\[build' "$logdir/build.log" || true
echo "== e2e: binaries ready after $((SECONDS - start))s"

echo "== e2e: suite"
suite_start=$SECONDS
python3 -m pytest -q -m e2e e2e/tests -p no:cacheprovider "$@"
echo "== e2e: suite passed in $((SECONDS - suite_start))s (total $((SECONDS - start))s)"

# The newest Kubernetes the module proxy serves: its control plane built and cached beside the
# pinned one, and the tests of what changes most between versions (DRA, gating and release).
newest="$(sed -n 's/^KUBERNETES_NEWEST_VERSION=//p' e2e/versions.env)"
if [[ -n "$newest" && "${BERTH_E2E_SKIP_NEWEST:-}" != 1 ]]; then
    echo "== e2e: Kubernetes $newest control plane; log: $logdir/build-newest.log"
    newest_start=$SECONDS
    if ! BERTH_E2E_KUBERNETES_VERSION="$newest" e2e/build.sh kubernetes \
            > "$logdir/build-newest.log" 2>&1; then
        tail -n 60 "$logdir/build-newest.log"
        echo "e2e: build of Kubernetes $newest failed" >&2
        exit 1
    fi
    BERTH_E2E_KUBERNETES_VERSION="$newest" python3 -m pytest -q -m e2e -p no:cacheprovider \
        e2e/tests/test_dra.py e2e/tests/test_berth_release.py e2e/tests/test_scheduling_gates.py
    echo "== e2e: Kubernetes $newest passed in $((SECONDS - newest_start))s"
fi
