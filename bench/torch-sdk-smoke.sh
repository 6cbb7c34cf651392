#!/usr/bin/env bash
# ctest bench_torch_sdk: bench/torch-sdk.py on the CPU with a few seeds, with a python3 that imports torch:
# the rates (every SDK side and the plain loop), and --verify with the GPU's fast paths run on the CPU (the
# next seed prepared ahead by the helper process, the next two by two worker threads, guessed and told, and one
# by one worker, the metric graphs emulated).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import torch' 2>/dev/null; then
		out=$(PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 "$p" "$here/torch-sdk.py" --device cpu --seeds 3 --slots 0 \
			--rounds 1 --checks attention.bwd,rmsnorm.fwd --dtypes bf16)
		echo "$out"
		[[ $(grep -cE '^\| [a-z]+\.[a-z]+ \| bf16( \| [0-9.]+){7} \|$' <<<"$out") == 2 ]] ||
			{ echo "bench_torch_sdk: expected two rows of figures" >&2; exit 1; }
		out=$(PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 NUMWATCH_PREPARE_AHEAD=process "$p" "$here/torch-sdk.py" \
			--device cpu --emulate-graphs --verify 2 --seeds 0 --slots 0) ||
			{ echo "$out"; echo "bench_torch_sdk: --verify failed" >&2; exit 1; }
		echo "$out"
		grep -qE '^verify: 200 fast trials compared with in-line ones, 0 differences \(0 seeds.*helper: ready.*graphs: [1-9][0-9]* captured' \
			<<<"$out" || { echo "bench_torch_sdk: --verify did not compare what it should" >&2; exit 1; }
		exit 0
	fi
done
echo "bench_torch_sdk: no python3 imports torch (Debian: apt-get install python3-torch)" >&2
exit 1
