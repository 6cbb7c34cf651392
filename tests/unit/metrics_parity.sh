#!/usr/bin/env bash
# ctest metrics_parity: tests/unit/metrics_parity.py with the first python3 that imports torch (the one on
# PATH, else Debian's /usr/bin/python3). Nothing is skipped: without torch this fails and says why.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import torch' 2>/dev/null; then
		PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 exec "$p" "$here/metrics_parity.py" "$@"
	fi
done
echo "metrics_parity: no python3 imports torch (Debian: apt-get install python3-torch, or scripts/deps)" >&2
exit 1
