#!/usr/bin/env bash
# demo-history.sh: builds every commit that scripts/make-demo-repo creates,
# the way the daemon does (kernels/ standalone against a checkout of each
# commit, in its own build directory), and checks what the demo relies on:
#
#   - the history is reproducible (two runs give the same commit ids);
#   - commit 5 does not build; every other commit does;
#   - the runners of commits 1 and 2, and of 6, 7 and 8, are byte-identical
#     (a README change and a comment change leave the binary alone), while
#     3, 4 and 6 each change it;
#   - commits 1-3 and 6-8 pass every seed tried; commit 4 fails exactly the
#     seeds whose shape has cols > 1024 and cols % 4 != 0, at every dtype.
#
# usage: demo-history.sh [SEEDS]   (default 100 seeds per check and dtype)
set -euo pipefail

seeds=${1:-100}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
	echo "demo-history: $*" >&2
	exit 1
}

"$top/scripts/make-demo-repo" "$work/repo" >"$work/shas"
"$top/scripts/make-demo-repo" "$work/repo2" >"$work/shas2"
cmp -s "$work/shas" "$work/shas2" || fail "two runs of make-demo-repo gave different commit ids"
[ "$(wc -l <"$work/shas")" -eq 8 ] || fail "expected 8 commits, got $(wc -l <"$work/shas")"

declare -a sha title hash
i=0
while read -r s t; do
	i=$((i + 1))
	sha[i]=$s
	title[i]=$t
done <"$work/shas"

for i in $(seq 1 8); do
	mkdir -p "$work/src$i"
	git -C "$work/repo" archive "${sha[i]}" | tar -x -C "$work/src$i"
	cmake -S "$top/kernels" -B "$work/b$i" -DNW_LIBRARY_DIR="$work/src$i" -DNW_CUDA=OFF \
		-DCMAKE_BUILD_TYPE=Release >"$work/configure$i.log" 2>&1 || fail "commit $i: configure failed"
	if cmake --build "$work/b$i" -j2 >"$work/build$i.log" 2>&1; then
		[ "$i" -ne 5 ] || fail "commit 5 (${title[5]}) was expected not to build"
		hash[i]=$(sha256sum <"$work/b$i/numwatch-runner-host" | cut -d' ' -f1)
	else
		[ "$i" -eq 5 ] || fail "commit $i (${title[i]}) does not build: $(tail -5 "$work/build$i.log")"
		hash[i]=none
	fi
	echo "commit $i ${sha[i]:0:7} runner ${hash[i]:0:12} ${title[i]}"
done

[ "${hash[1]}" = "${hash[2]}" ] || fail "commits 1 and 2 differ only in the README, but their runners differ"
[ "${hash[6]}" = "${hash[7]}" ] || fail "commits 6 and 7 differ only in comments, but their runners differ"
[ "${hash[7]}" = "${hash[8]}" ] || fail "commits 7 and 8 differ only in the README, but their runners differ"
[ "${hash[2]}" != "${hash[3]}" ] || fail "commit 3 changed the code, but not the runner"
[ "${hash[3]}" != "${hash[4]}" ] || fail "commit 4 changed the code, but not the runner"
[ "${hash[4]}" != "${hash[6]}" ] || fail "commit 6 changed the code, but not the runner"

# One line per trial: verdict rows cols (the answer's keys keep their order).
trials() {
	"$1" --check "$2" --dtype "$3" --seed 0 --count "$seeds" |
		sed -n 's/.*"verdict":"\([a-z]*\)".*"shape":\[\([0-9]*\),\([0-9]*\)\].*/\1 \2 \3/p'
}

for i in 1 2 3 4 6 7 8; do
	for check in softmax.fwd softmax.bwd; do
		for dtype in f32 f16 bf16; do
			n=0
			bad=0
			while read -r verdict rows cols; do
				n=$((n + 1))
				want=pass
				if [ "$i" -eq 4 ] && [ "$rows" -gt 0 ] && [ "$cols" -gt 1024 ] && [ $((cols % 4)) -ne 0 ]; then
					want=fail
				fi
				if [ "$verdict" != "$want" ]; then
					echo "commit $i $check $dtype: [$rows,$cols] gave $verdict, expected $want" >&2
					bad=$((bad + 1))
				fi
			done < <(trials "$work/b$i/numwatch-runner-host" $check $dtype)
			[ "$n" -eq "$seeds" ] || fail "commit $i $check $dtype: $n answers for $seeds seeds"
			[ "$bad" -eq 0 ] || fail "commit $i $check $dtype: $bad unexpected verdicts"
		done
	done
done
echo "demo-history: ok ($seeds seeds per check and dtype)"
