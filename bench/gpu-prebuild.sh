#!/usr/bin/env bash
# bench/gpu-prebuild.sh OUT: builds the CUDA and host runners of every commit
# of the demo history on this machine (the GPU host has no network and none of
# our build dependencies), for bench/gpu-suite.sh to carry. Writes
#   OUT/repo/                    the demo history (scripts/make-demo-repo)
#   OUT/prebuilt/<sha>           the blob name of the commit's runners, or FAILED
#   OUT/blobs/<name>/*.xz        numwatch-runner-cuda and -host, xz-compressed
#   OUT/bin/                     numwatchd, numwatch and gpu_refs (Release build of this tree)
# Identical runners (commits that do not change the binary) share one blob.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: gpu-prebuild.sh OUT}
mkdir -p "$out" && out=$(cd "$out" && pwd)
export PATH=/usr/local/cuda/bin:$PATH
rm -rf "$out/repo" "$out/prebuilt" "$out/blobs" "$out/work"
mkdir -p "$out/prebuilt" "$out/blobs" "$out/work"
"$root/scripts/make-demo-repo" "$out/repo" >/dev/null
# One fixed worktree path and ccache: each commit recompiles only what it changed.
launcher=()
if command -v ccache >/dev/null; then
	export CCACHE_BASEDIR=$out/work CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/nw-ccache}
	launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
for sha in $(git -C "$out/repo" rev-list --reverse main); do
	wt=$out/work/src
	rm -rf "$wt" "$out/work/build"
	git -C "$out/repo" worktree prune
	git -C "$out/repo" worktree add -q --detach "$wt" "$sha"
	title=$(git -C "$out/repo" log -1 --format=%s "$sha")
	if cmake -S "$root/kernels" -B "$out/work/build" -DNW_LIBRARY_DIR="$wt" -DNW_CUDA=ON \
		-DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >"$out/work/log" 2>&1 &&
		cmake --build "$out/work/build" -j"$(nproc)" >>"$out/work/log" 2>&1; then
		blob=$(cat "$out/work/build/numwatch-runner-cuda" "$out/work/build/numwatch-runner-host" | sha256sum | cut -c1-16)
		if [[ ! -d $out/blobs/$blob ]]; then
			mkdir -p "$out/blobs/$blob"
			xz -9 -c "$out/work/build/numwatch-runner-cuda" >"$out/blobs/$blob/numwatch-runner-cuda.xz"
			xz -9 -c "$out/work/build/numwatch-runner-host" >"$out/blobs/$blob/numwatch-runner-host.xz"
		fi
		echo "$blob" >"$out/prebuilt/$sha"
		echo "built  ${sha:0:12} $blob  $title"
	else
		echo FAILED >"$out/prebuilt/$sha"
		echo "FAILED ${sha:0:12}                   $title"
	fi
	git -C "$out/repo" worktree remove --force "$wt"
done
cmake -S "$root" -B "$out/work/project" -DCMAKE_BUILD_TYPE=Release -DNW_CUDA=ON "${launcher[@]}" >"$out/work/log" 2>&1 &&
	cmake --build "$out/work/project" -j"$(nproc)" --target numwatchd numwatch gpu_refs >>"$out/work/log" 2>&1 ||
	{ tail -30 "$out/work/log"; exit 1; }
mkdir -p "$out/bin"
cp "$out/work/project/daemon/numwatchd" "$out/work/project/daemon/numwatch" "$out/work/project/tests/gpu_refs" "$out/bin/"
rm -rf "$out/work"
du -sh "$out/blobs" "$out/bin"
