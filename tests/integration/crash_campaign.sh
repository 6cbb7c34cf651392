#!/usr/bin/env bash
# The crash campaign's short version (issue 14): bench/crash-campaign.sh with 6
# SIGKILLs of numwatchd and 2 PostgreSQL restarts over a 12-commit history;
# docs/benchmarks.md records a long run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../bench/crash-campaign.sh" --kills 6 --restarts 2 --commits 12 --build "${NW_BUILD_DIR:?}" \
	--seed "${NW_CRASH_SEED:-$RANDOM}"
