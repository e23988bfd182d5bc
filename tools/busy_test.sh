#!/usr/bin/env bash
# Run the test suite on a busy machine, as a user's laptop or a shared CI runner is: N processes
# (default 2, one per core here) burn CPU beside it for the whole run, and are stopped however it ends.
#   tools/busy_test.sh [pytest args...]        BURNERS=3 tools/busy_test.sh tests/unit
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
burners=()
stop() { for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; done; }
trap stop EXIT INT TERM
for _ in $(seq "${BURNERS:-2}"); do
  python3 -c 'while True: pass' &
  burners+=($!)
done
echo "busy_test: ${#burners[@]} CPU burners running (pids ${burners[*]})"
# Without PYTEST_XDIST (run directly, not by make): make test's workers, one per core plus the waiting
# and engine lanes.
workers=$(( $(nproc) + 2 ))
# shellcheck disable=SC2086  # the xdist options are words
"$PY" -m pytest -q ${PYTEST_XDIST:--n $workers --dist loadscope --no-loadscope-reorder} "$@"
