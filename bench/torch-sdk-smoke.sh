#!/usr/bin/env bash
# ctest bench_torch_sdk: bench/torch-sdk.py on the CPU with a few seeds, with a python3 that imports torch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import torch' 2>/dev/null; then
		out=$(PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 "$p" "$here/torch-sdk.py" --device cpu --seeds 3 --slots 0 \
			--checks attention.bwd,rmsnorm.fwd --dtypes bf16)
		echo "$out"
		[[ $(grep -c '^| [a-z]*\.[a-z]* | bf16 | [0-9.]* | [0-9.]* | [0-9.]* |$' <<<"$out") == 2 ]] ||
			{ echo "bench_torch_sdk: expected two rows of figures" >&2; exit 1; }
		exit 0
	fi
done
echo "bench_torch_sdk: no python3 imports torch (Debian: apt-get install python3-torch)" >&2
exit 1
