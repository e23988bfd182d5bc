#!/usr/bin/env bash
# Run a command (make test, by `make test-busy`) on a busy machine, as a user's laptop or a shared CI
# runner is: BURNERS processes (default 2, one per core here) burn CPU beside it for the whole run and
# are stopped however it ends. Its exit status is the command's.
#   tools/busy_test.sh make test        BURNERS=3 tools/busy_test.sh .venv/bin/python -m pytest tests/unit
set -u
burners=()
stop() { for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; done; }
trap stop EXIT INT TERM
for _ in $(seq "${BURNERS:-2}"); do
  python3 -c 'while True: pass' &
  burners+=($!)
done
echo "busy_test: ${#burners[@]} CPU burners running (pids ${burners[*]})"
"$@"
