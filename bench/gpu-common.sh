# shellcheck shell=bash
# bench/gpu-common.sh: what the GPU benches share (sourced by gpu-suite.sh, multi-gpu.sh and fusedops-gpu.sh).
# They run on a GPU host with no network and none of our libraries, from the repo root, with
# .gpu/ carried: debs/ (shared/tools/offline-debs + git, libjansson-dev), bin/ and the runners
# that bench/gpu-prebuild.sh built for every commit of the demo history.

log() { echo "[$(date +%T)] $*"; }

# gpu_runtime G: unpacks the runtime packages into /tmp/nwroot (NW_GPU_ROOT) and puts them on
# the paths. The machine's own programs run without them: gpu_host.
gpu_runtime() {
	local f R=${NW_GPU_ROOT:-/tmp/nwroot}
	mkdir -p "$R"
	for f in "$1"/debs/*.deb; do dpkg -x "$f" "$R"; done
	if [[ -n ${LD_LIBRARY_PATH:-} ]]; then
		gpu_host_env=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
	else
		gpu_host_env=(env -u LD_LIBRARY_PATH)
	fi
	gpu_host_llp=${LD_LIBRARY_PATH:-}
	export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu:$R/usr/lib/postgresql/15/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	command -v git >/dev/null || export PATH=$PATH:$R/usr/bin GIT_EXEC_PATH=$R/usr/lib/git-core
	export NW_PGBIN=$R/usr/lib/postgresql/15/bin
}

# gpu_host CMD...: runs one of the machine's own programs (nvidia-smi, its python3 with torch)
# with the machine's LD_LIBRARY_PATH, as it was before gpu_runtime (unset if it had none): the
# Debian libraries unpacked for numwatchd and PostgreSQL break them. "${gpu_host_env[@]}" CMD &
# does the same for a program started in the background ($! is the program's pid);
# $gpu_host_llp is that LD_LIBRARY_PATH (empty: none), for [slots] env.
gpu_host_env=(env)
# shellcheck disable=SC2034 # for the scripts that source this
gpu_host_llp=${LD_LIBRARY_PATH:-}
gpu_host() { "${gpu_host_env[@]}" "$@"; }

# gpu_rehearsal_fakes: for NW_GPU_REHEARSAL=1 on a machine without GPUs, stand-ins for
# nvidia-smi (two fake GPUs, 50% busy) and nvidia-cuda-mps-control (refuses: no MPS) in
# /tmp/fakebin, first on PATH; stand-ins already there are kept.
gpu_rehearsal_fakes() {
	local b=/tmp/fakebin
	mkdir -p "$b"
	[[ -x $b/nvidia-cuda-mps-control ]] || printf '#!/bin/sh\nexit 1\n' >"$b/nvidia-cuda-mps-control"
	[[ -x $b/nvidia-smi ]] || cat >"$b/nvidia-smi" <<'SMI'
#!/bin/bash
case "$*" in
*-L*) echo "GPU 0: Fake (UUID: x)"; echo "GPU 1: Fake (UUID: y)";;
*name,driver*) echo "Fake GPU, 0.0";;
*-lms*) while :; do for i in 0 1; do echo "$(date '+%Y/%m/%d %H:%M:%S.%3N'), $i, 50"; done; sleep 0.2; done;;
esac
SMI
	chmod +x "$b/nvidia-cuda-mps-control" "$b/nvidia-smi"
	export PATH=$b:$PATH
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

# gpu_util_start FILE: samples every GPU's utilization.gpu every 0.2 s into FILE (CSV: timestamp,
# index, percent; gpu_busy reads it) until killed; sets smi to the sampler's pid.
gpu_util_start() {
	"${gpu_host_env[@]}" nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader,nounits \
		-lms 200 >"$1" 2>/dev/null &
	# shellcheck disable=SC2034 # the caller's finish stops it
	smi=$!
}

# gpu_mps_start: CUDA MPS for the slots sharing a GPU (one control daemon serves every GPU);
# sets mps=on or none. gpu_mps_stop ends it.
gpu_mps_start() {
	export CUDA_MPS_PIPE_DIRECTORY=/tmp/nwmps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/nwmps/log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	mps=none
	if gpu_host nvidia-cuda-mps-control -d; then
		mps=on
	else
		log "MPS would not start: the runners time-slice"
	fi
}
gpu_mps_stop() { [[ ${mps:-none} != on ]] || echo quit | gpu_host nvidia-cuda-mps-control; }

# gpu_post PATH JSON: a POST to the daemon's API (port 18080, NW_GPU_PORT) with the bench's token.
gpu_post() {
	gpu_host python3 - "$1" "$2" "${NW_GPU_PORT:-18080}" <<'PY'
import sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:%s%s" % (sys.argv[3], sys.argv[1]), method="POST", data=sys.argv[2].encode(),
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

# gpu_busy CSV FROM TO N: the mean utilization.gpu of GPUs 0 to N-1 between the epoch seconds FROM
# and TO, from nvidia-smi's samples (--query-gpu=timestamp,index,utilization.gpu --format=csv,
# noheader,nounits -lms MS, in CSV): "gpu0 52%, gpu1 20%", or "no samples".
gpu_busy() {
	gpu_host python3 - "$@" <<'PY'
import sys, datetime
path, t0, t1, n = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
per = {}
for line in open(path):
    try:
        ts, idx, util = [x.strip() for x in line.split(",")]
        t = datetime.datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        continue
    if t0 <= t <= t1:
        per.setdefault(int(idx), []).append(float(util))
print(" ".join("gpu%d %.0f%%" % (i, sum(v) / len(v)) for i, v in sorted(per.items()) if i < n) or "no samples")
PY
}
