# shellcheck shell=bash
# bench/gpu-common.sh: what the GPU benches share (sourced by gpu-suite.sh and multi-gpu.sh).
# They run on a GPU host with no network and none of our libraries, from the repo root, with
# .gpu/ carried: debs/ (shared/tools/offline-debs + git, libjansson-dev), bin/ and the runners
# that bench/gpu-prebuild.sh built for every commit of the demo history.

log() { echo "[$(date +%T)] $*"; }

# gpu_runtime G: unpacks the runtime packages into /tmp/nwroot and puts them on the paths.
gpu_runtime() {
	local f R=/tmp/nwroot
	mkdir -p "$R"
	for f in "$1"/debs/*.deb; do dpkg -x "$f" "$R"; done
	export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu:$R/usr/lib/postgresql/15/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	command -v git >/dev/null || export PATH=$PATH:$R/usr/bin GIT_EXEC_PATH=$R/usr/lib/git-core
	export NW_PGBIN=$R/usr/lib/postgresql/15/bin
}

# gpu_postgres DIR: a fresh cluster in DIR (a warm machine keeps /tmp between runs); prints its conninfo.
gpu_postgres() {
	local conn
	scripts/pgcluster stop "$1" >/dev/null 2>&1
	rm -rf "$1"
	conn=$(scripts/pgcluster start "$1") || return 1
	echo "$conn options='-c jit=off'"
}

# gpu_build_command G: the [build] command that unpacks a commit's prebuilt runners.
gpu_build_command() {
	local unxz="python3 -c 'import lzma,sys; open(sys.argv[2],\"wb\").write(lzma.open(sys.argv[1]).read())'"
	echo "b=\$(cat \"$1/prebuilt/\$NUMWATCH_COMMIT\") && test \"\$b\" != FAILED &&" \
		"$unxz \"$1/blobs/\$b/numwatch-runner-cuda.xz\" \"\$NUMWATCH_BUILD_DIR/numwatch-runner-cuda\" &&" \
		"$unxz \"$1/blobs/\$b/numwatch-runner-host.xz\" \"\$NUMWATCH_BUILD_DIR/numwatch-runner-host\" &&" \
		"chmod +x \"\$NUMWATCH_BUILD_DIR\"/numwatch-runner-*"
}

# gpu_mps_start: CUDA MPS for the slots sharing a GPU (one control daemon serves every GPU);
# sets mps=on or none. gpu_mps_stop ends it.
gpu_mps_start() {
	export CUDA_MPS_PIPE_DIRECTORY=/tmp/nwmps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/nwmps/log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	mps=none
	if nvidia-cuda-mps-control -d; then
		mps=on
	else
		log "MPS would not start: the runners time-slice"
	fi
}
gpu_mps_stop() { [[ ${mps:-none} != on ]] || echo quit | nvidia-cuda-mps-control; }

# gpu_post PATH JSON: a POST to the daemon's API (port 18080) with the bench's token.
gpu_post() {
	python3 - "$1" "$2" <<'PY'
import sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:18080" + sys.argv[1], method="POST", data=sys.argv[2].encode(),
    headers={"Authorization": "Bearer nw_gpu_suite", "Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=10).read().decode())
PY
}

# gpu_verdicts_table: every commit's verdict and its checks not clean, a Markdown table (sql()
# of the caller: its database).
gpu_verdicts_table() {
	echo "| # | commit | title | verdict | checks not clean |"
	echo "| ---: | --- | --- | --- | --- |"
	sql "SELECT '| ' || position || ' | ' || left(sha, 12) || ' | ' || title || ' | ' || commit_verdict(id) || ' | ' ||
		coalesce((SELECT string_agg(k.name || ' ' || s.dtype || ': ' || s.verdict
		|| CASE WHEN s.regression_new THEN ' (new)' WHEN s.verdict = 'regressed' THEN ' (open)' ELSE '' END
		|| ' (' || s.failures || '/' || s.trials || ')', ', '
		ORDER BY k.name, s.dtype) FROM stats s JOIN checks k ON k.id = s.check_id WHERE s.commit_id = c.id
		AND s.verdict NOT IN ('clean', 'build_failed')), '') || ' |' FROM commits c ORDER BY position"
}
