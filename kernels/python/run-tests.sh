#!/usr/bin/env bash
# The Python SDK's self-tests (ctest 'python_sdk'): the list SDK (standard library only) and the torch SDK
# (numwatch_runner.torchcheck) on the CPU, with the first python3 that imports torch: the one on PATH,
# else Debian's /usr/bin/python3 (python3-torch, installed by scripts/deps). Nothing is skipped: without
# torch this fails and says why.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import torch' 2>/dev/null; then
		py=$p
		break
	fi
done
if [[ -z $py ]]; then
	echo "python_sdk: no python3 imports torch (Debian: apt-get install python3-torch, or scripts/deps)" >&2
	exit 1
fi
cd "$here"
echo "python_sdk: $("$py" -c 'import sys, torch; print("Python", sys.version.split()[0], "torch", torch.__version__)')"
# No __pycache__ in the source tree; threads capped: ctest runs other tests beside this one.
PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 exec "$py" -m unittest test_numwatch_runner test_torchcheck
