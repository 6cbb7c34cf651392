#!/usr/bin/env bash
# prepare-ahead.sh RUNNER: a trial prepared ahead on the worker thread
# (NW_PREPARE_AHEAD=1, sdk/prepare.c) answers exactly as one prepared in line
# (=0): on the command line (seeds in order, repeats 2), and over the
# protocol with requests in and out of order, a family asked for, repeats
# changing, a check that does not split its trial, a bad request between, and
# seeds that skip and go back (the two seeds prepared ahead thrown away or kept).
set -euo pipefail
runner=${1:?usage: prepare-ahead.sh RUNNER}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
	echo "FAIL: $*"
	exit 1
}
strip() { sed -E 's/"kernel_us":[-0-9.e+]+,?//'; }
for check in softmax.fwd softmax.bwd attention.fwd; do
	for dtype in f32 f16 bf16; do
		for a in 0 1; do
			NW_PREPARE_AHEAD=$a "$runner" --check $check --dtype $dtype --seed 0 --count 25 --repeats 2 \
				2>/dev/null | strip >"$work/cli-$a" || true
		done
		[[ $(wc -l <"$work/cli-1") == 25 ]] || fail "$check $dtype: $(wc -l <"$work/cli-1") answers of 25"
		cmp -s "$work/cli-0" "$work/cli-1" || fail "$check $dtype: answers differ when prepared ahead"
	done
done
python3 - >"$work/requests" <<'PY'
import json
reqs = [("softmax.fwd", "f32", 5, None, 1), ("softmax.fwd", "f32", 6, None, 1),
        ("softmax.fwd", "f32", 3, None, 1), ("softmax.fwd", "f32", 4, None, 2),
        ("softmax.fwd", "bf16", 5, None, 2), ("layernorm.fwd", "f32", 6, None, 1),
        ("softmax.bwd", "bf16", 7, "tail", 2), ("softmax.bwd", "bf16", 8, "tail", 2),
        ("softmax.bwd", "f64", 9, None, 1), ("softmax.bwd", "bf16", 9, None, 2),
        ("softmax.fwd", "f32", 10, None, 1), ("attention.fwd", "bf16", 3, None, 1), ("attention.fwd", "bf16", 4, None, 1)] + [("softmax.bwd", "f16", s, None, 1) for s in range(40)] + [("softmax.bwd", "f16", s, None, 1) for s in (42, 41, 45, 46, 44)]
print(json.dumps({"op": "hello", "protocol": 1}))
for i, (c, d, s, f, r) in enumerate(reqs):
    print(json.dumps({"op": "trial", "id": i, "check": c, "dtype": d, "seed": s, "repeats": r, "family": f}))
print(json.dumps({"op": "bye"}))
PY
for a in 0 1; do
	NUMWATCH_PROTOCOL=1 NW_PREPARE_AHEAD=$a "$runner" <"$work/requests" 2>/dev/null | strip >"$work/proto-$a"
done
[[ $(wc -l <"$work/proto-1") == 60 ]] || fail "$(wc -l <"$work/proto-1") protocol answers of 60"
grep -q '"error"' "$work/proto-1" || fail "the bad request was not answered with an error"
cmp -s "$work/proto-0" "$work/proto-1" || fail "protocol answers differ when prepared ahead"
echo "ok: 225 command-line and 58 protocol answers the same prepared ahead and in line"
