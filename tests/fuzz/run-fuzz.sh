#!/usr/bin/env bash
# Runs one fuzz target for a bounded time, as ctest does (tests/fuzz/CMakeLists.txt).
#
#   run-fuzz.sh TARGET SEED_CORPUS WORK_DIR SECONDS [LIBFUZZER_ARGS...]
#
# The target starts from the seed corpus (in the repository, never written)
# and the inputs it found before, kept in WORK_DIR/corpus. A crash, a
# sanitizer report, a leak, a timeout of one input or an out-of-memory fails
# the run and leaves the input in WORK_DIR as crash-*, leak-*, timeout-* or
# oom-*; the last lines say how to replay it and keep it in the seed corpus.
set -euo pipefail

(($# >= 4)) || {
	echo "usage: $0 TARGET SEED_CORPUS WORK_DIR SECONDS [LIBFUZZER_ARGS...]" >&2
	exit 2
}
target=$1 seeds=$2 work=$3 seconds=$4
shift 4

[[ -x $target ]] || {
	echo "run-fuzz: '$target' is not built" >&2
	exit 1
}
[[ -d $seeds ]] || {
	echo "run-fuzz: no seed corpus '$seeds'" >&2
	exit 1
}
mkdir -p "$work/corpus"
# Earlier crashes stay until someone looks; each run reports only its own.
rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* "$work"/slow-unit-*

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
symbolizer=$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)
[[ -z $symbolizer ]] || export ASAN_SYMBOLIZER_PATH=$symbolizer

# tests/fuzz/NAME.dict, where there is one: words that get the fuzzer past whole-token comparisons.
dict=$(dirname "$(dirname "$seeds")")/$(basename "$seeds").dict
dict_arg=()
[[ ! -f $dict ]] || dict_arg=(-dict="$dict")

rc=0
# -timeout: one input taking 25 s is a hang; -rss_limit_mb: 2 GiB is an out-of-memory.
"$target" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$work/" "${dict_arg[@]}" "$@" "$work/corpus" "$seeds" || rc=$?

if ((rc != 0)); then
	mapfile -t found < <(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' \
		-o -name 'timeout-*' -o -name 'oom-*' \) | sort)
	echo "run-fuzz: $(basename "$target") failed (exit $rc); inputs kept: ${found[*]:-none}" >&2
	for f in "${found[@]}"; do
		echo "run-fuzz: replay with: $target $f" >&2
		echo "run-fuzz: once fixed, keep it: cp $f $seeds/$(basename "$f")" >&2
	done
	exit 1
fi
echo "run-fuzz: $(basename "$target"): no crash (limit ${seconds}s); $(find "$work/corpus" -type f | wc -l) inputs found so far in $work/corpus, $(find "$seeds" -type f | wc -l) seeds"
