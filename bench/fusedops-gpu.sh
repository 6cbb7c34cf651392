#!/usr/bin/env bash
# bench/fusedops-gpu.sh: the example PyTorch/Triton library watched end to end on a GPU (issue 15).
# Runs on the GPU host (its own python3 with torch 2.x and Triton 3.x; no network, none of our
# libraries) from the repo root with .gpu/ carried (debs/ and bin/numwatchd, as for
# bench/multi-gpu.sh). In one go, with CUDA MPS on, it
#   1. makes the planted history of kernels/python/examples/make-fusedops-history.sh and runs one
#      numwatchd over it with GPU slots (the configuration of docs/watching-your-library.md: the
#      checks kernels/python/examples/fusedops_checks.py copied into each build, [build] identity
#      = fusedops/**, TRITON_CACHE_DIR, the SDK on PYTHONPATH), mail to an mbox; it waits until
#      every commit is judged, every bisection done and no mail pending, and reports each
#      commit's verdicts against the bug planted there, the bisections and the culprit mails;
#   2. runs SEEDS seeds of every check x dtype on the history's first commit (clean everywhere:
#      the later commits carry a planted bug until the end) through the daemon (POST
#      /api/v1/runs): failures (false alarms: must be 0), trials per second, GPU busy.
# The runners are the machine's python3 with its own LD_LIBRARY_PATH ([slots] env), not the
# Debian libraries gpu_runtime unpacks for numwatchd and PostgreSQL. The fusedops backend must be
# triton on the GPU (the runner's hello is checked before the daemon starts).
# $OUT (default .gpu/out-fused) gets report.md, daemon.log, mbox, gpu-util.csv and nw.conf.
#
# Environment (defaults for the GPU; every wait is bounded, all of it by NW_FUSED_TOTAL_S):
#   NW_FUSED_SLOTS=0*4       the daemon's slots (rehearsal: host*2)
#   NW_FUSED_SEEDS=1000      seeds per check x dtype on the clean commit
#   NW_FUSED_PER_COMMIT=64   [trials] per_commit;  NW_FUSED_MAX=400: [trials] max
#   NW_FUSED_HISTORY_S=240   until every commit is judged
#   NW_FUSED_SETTLE_S=150    then until the bisections are done and the mail sent
#   NW_FUSED_RUNS_S=300      the seeds on the clean commit
#   NW_FUSED_TOTAL_S=510     the whole script, set-up included (the device tool stops at 600 s)
#   NW_FUSED_PORT=18080      the daemon's HTTP port;  NW_FUSED_TMP=/tmp/nwfused: its work space
#   NW_GPU_REHEARSAL=1       rehearses it on a machine without GPUs: stand-ins for nvidia-smi and
#                            nvidia-cuda-mps-control (gpu_rehearsal_fakes), host slots, a python3
#                            that imports torch (Debian's python3-torch) and the torch fallbacks.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
G=$root/.gpu
OUT=${OUT:-$G/out-fused}
REHEARSAL=${NW_GPU_REHEARSAL:-0}
if [[ $REHEARSAL == 1 ]]; then SLOTS=${NW_FUSED_SLOTS:-host*2}; else SLOTS=${NW_FUSED_SLOTS:-0*4}; fi
SEEDS=${NW_FUSED_SEEDS:-1000}
PER_COMMIT=${NW_FUSED_PER_COMMIT:-64}
MAX=${NW_FUSED_MAX:-400}
HISTORY_S=${NW_FUSED_HISTORY_S:-240}
SETTLE_S=${NW_FUSED_SETTLE_S:-150}
RUNS_S=${NW_FUSED_RUNS_S:-300}
TOTAL_S=${NW_FUSED_TOTAL_S:-510}
export NW_GPU_PORT=${NW_FUSED_PORT:-18080}
W=${NW_FUSED_TMP:-/tmp/nwfused}
examples=$root/kernels/python/examples
sdk=$root/kernels/python
mkdir -p "$OUT"
report=$OUT/report.md
rm -f "$report" "$OUT/mbox" "$OUT/daemon.log" "$OUT/gpu-util.csv" "$OUT/nw.conf"
# shellcheck source=bench/gpu-common.sh
. "$root/bench/gpu-common.sh"
sql() { "$NW_PGBIN/psql" -XAtq -d "$db" -c "$1"; }
die() { echo "fusedops-gpu: $*" | tee -a "$report"; exit 1; }
# What the report says about how it was run: the knobs set.
knobs=$(env | grep -E '^(NW_FUSED_[A-Z_]+|NW_GPU_REHEARSAL)=' | sort | tr '\n' ' ')

[[ $REHEARSAL != 1 ]] || gpu_rehearsal_fakes
log "runtime packages"
export NW_GPU_ROOT=${NW_GPU_ROOT:-$W/root}
gpu_runtime "$G"
gpu=$(gpu_host nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
log "GPU: ${gpu:-none}"

# The runners' python3: the machine's own, which imports torch (and on the GPU, Triton).
py=
for p in python3 /usr/bin/python3; do
	if gpu_host "$p" -c 'import torch' 2>/dev/null; then
		py=$(command -v "$p")
		break
	fi
done
[[ -n $py ]] || die "no python3 imports torch"

log "the planted history"
rm -rf "$W/repo" "$W/state" "$W/triton" "$W/probe"
mkdir -p "$W/triton" "$W/probe"
gpu_host "$examples/make-fusedops-history.sh" "$W/repo" >/dev/null || die "no history"
mapfile -t sha < <(git -C "$W/repo" log --reverse --format=%H)
mapfile -t title < <(git -C "$W/repo" log --reverse --format=%s)
((${#sha[@]} == 7)) || die "the history has ${#sha[@]} commits, not 7"

# What the runners see besides the daemon's fixed list: the SDK, the python3 that imports torch,
# the machine's LD_LIBRARY_PATH (empty: none) instead of ours, one Triton cache.
slots_env="PYTHONPATH=$sdk PATH=$(dirname "$py"):\${PATH} LD_LIBRARY_PATH=$gpu_host_llp TRITON_CACHE_DIR=$W/triton"
slots_env+=" OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1"

# The runner's hello at the first commit, as a slot starts it (its directory, its environment):
# the backend, torch and Triton versions; on the GPU the backend must be triton.
git -C "$W/repo" archive "${sha[0]}" fusedops | tar -x -C "$W/probe"
cp "$examples/fusedops_checks.py" "$W/probe/"
if [[ $SLOTS == host* ]]; then cvd=; else cvd=${SLOTS%%[*,]*}; fi
hello=$(cd "$W/probe" && printf '{"op":"hello","protocol":1}\n' | gpu_host PYTHONPATH="$sdk" TRITON_CACHE_DIR="$W/triton" \
	CUDA_VISIBLE_DEVICES="$cvd" OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 timeout 120 "$py" fusedops_checks.py 2>&1 | head -1)
# Its runner and device, and the backend: the last word of the runner's name ("fusedops-checks
# 0.1.0 (triton)").
read -r backend hello_short < <(gpu_host "$py" -c 'import json, sys
try:
    h = json.loads(sys.argv[1])
    print(h["runner"].rsplit("(", 1)[1].rstrip(")"), h["runner"] + ", " + json.dumps(h.get("device") or h.get("error")))
except Exception:
    print("?", sys.argv[1][:300])' "$hello")
log "hello: $hello_short"
versions=$(gpu_host "$py" -c 'import sys, torch
try:
    import triton; t = "Triton " + triton.__version__
except Exception:
    t = "no Triton"
print("python %s, torch %s (CUDA %s), %s" % (sys.version.split()[0], torch.__version__, torch.version.cuda, t))')
if [[ $REHEARSAL != 1 && $backend != triton ]]; then
	die "the runner's fusedops backend is '${backend:-?}', not triton: $hello"
fi

log "postgresql"
db=$(gpu_postgres "$W/pg") || die "cannot start postgresql"
gpu_mps_start
gpu_util_start "$OUT/gpu-util.csv"
daemon=
# shellcheck disable=SC2317 # run by the trap
finish() {
	[[ -z $daemon ]] || kill -TERM "$daemon" 2>/dev/null
	kill "$smi" 2>/dev/null
	gpu_mps_stop
	scripts/pgcluster stop "$W/pg" >/dev/null 2>&1
}
trap finish EXIT
trap 'exit 1' INT TERM

# The configuration of docs/watching-your-library.md, on GPU slots.
cat >"$OUT/nw.conf" <<CONF
[daemon]
state_dir = $W/state
database = $db
[repository]
name = fusedops
url = $W/repo
poll_interval = 2
[build]
command = cp -R fusedops "\$NUMWATCH_BUILD_DIR/" && cp "$examples/fusedops_checks.py" "\$NUMWATCH_BUILD_DIR/"
runner_host = fusedops_checks.py
runner_cuda = fusedops_checks.py
identity = fusedops/**
env = TRITON_CACHE_DIR=$W/triton
timeout = 120
[trials]
per_commit = $PER_COMMIT
max = $MAX
timeout = 120
hello_timeout = 120
[slots]
slots = $SLOTS
env = $slots_env
[http]
port = $NW_GPU_PORT
public_url = http://127.0.0.1:$NW_GPU_PORT/
[mail]
from = numwatch <numwatch@gpu.test>
to = dev@gpu.test
send_to_author = false
mbox = $OUT/mbox
CONF
"$G/bin/numwatchd" --config "$OUT/nw.conf" --check-config >/dev/null || die "the config was refused"
log "daemon: slots $SLOTS, MPS $mps, per_commit $PER_COMMIT"
"$G/bin/numwatchd" --config "$OUT/nw.conf" >"$OUT/daemon.log" 2>&1 &
daemon=$!
t_start=$SECONDS
# The token once the daemon serves (its migrations done: an insert during them could deadlock).
until gpu_host python3 -c 'import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/api/v1/health" % sys.argv[1], timeout=2)' "$NW_GPU_PORT" 2>/dev/null &&
	sql "INSERT INTO tokens (name, hash) VALUES ('gpu', sha256(convert_to('nw_gpu_suite', 'UTF8')))
	ON CONFLICT DO NOTHING" >/dev/null 2>&1; do
	if ((SECONDS - t_start >= 30)) || ! kill -0 "$daemon" 2>/dev/null; then
		tail -20 "$OUT/daemon.log"
		exit 1
	fi
	sleep 0.2
done

# wait_for SECONDS WHAT SQL: until SQL says t, the daemon dies, SECONDS pass or the script's own
# deadline (NW_FUSED_TOTAL_S, less 30 s for the report) does. Sets waited (seconds).
wait_for() {
	local t0=$SECONDS bound=$1
	((bound < TOTAL_S - 30 - SECONDS)) || bound=$((TOTAL_S - 30 - SECONDS))
	until [[ $(sql "$3" 2>/dev/null) == t ]]; do
		if ((SECONDS - t0 >= bound)); then
			waited=$((SECONDS - t0))
			log "$2: deadline passed after ${waited} s"
			notes+=("$2: deadline passed after ${waited} s")
			return 1
		fi
		kill -0 "$daemon" 2>/dev/null || { log "$2: the daemon died"; notes+=("$2: the daemon died"); tail -5 "$OUT/daemon.log"; return 1; }
		sleep 1
	done
	waited=$((SECONDS - t0))
	log "$2: ${waited} s"
}
notes=()
judged="SELECT count(*) = 7 AND count(*) FILTER (WHERE commit_verdict(id) = 'pending') = 0 FROM commits WHERE reachable"
idle="SELECT count(*) = 0 FROM jobs WHERE state IN ('queued', 'running')"
# As tests/lib/daemon.sh's nw_settled: nothing queued, bisections done, every culprit mailed, no mail pending.
settled="SELECT ($idle) AND (SELECT count(*) FROM bisections WHERE state <> 'done')
	+ (SELECT count(*) FROM regressions WHERE state IN ('open', 'bisecting'))
	+ (SELECT count(*) FROM mail WHERE state = 'pending')
	+ (SELECT count(DISTINCT b.culprit_id) FROM bisections b WHERE b.outcome = 'culprit'
		AND NOT EXISTS (SELECT 1 FROM mail m WHERE m.culprit_id = b.culprit_id AND m.kind = 'culprit')) = 0"

# 1. The history.
wait_for "$HISTORY_S" "every commit judged" "$judged"
history_s=$waited
wait_for "$SETTLE_S" "bisections done, mail sent" "SELECT ($judged) AND ($settled)"
settle_s=$waited

# 2. SEEDS seeds of every check x dtype on the first commit.
clean=${sha[0]}
log "$SEEDS seeds of every check x dtype on ${clean:0:12}"
pairs=$(sql "SELECT k.name || ':' || d FROM checks k, unnest(k.dtypes) d ORDER BY 1")
from=$(date +%s.%N)
for cd in $pairs; do
	gpu_post /api/v1/runs "{\"commit\": \"$clean\", \"check\": \"${cd%%:*}\", \"dtype\": \"${cd##*:}\", \"trials\": $SEEDS}" ||
		notes+=("POST /api/v1/runs $cd failed")
done >/dev/null
wait_for "$RUNS_S" "the runs on the clean commit" "$idle"
runs_s=$waited
# And whatever the history still had going, within what time is left.
wait_for 60 "settled after the runs" "SELECT ($judged) AND ($settled)"
# The span of the runs' own trials (the plan's were stored before 'from').
read -r r_from r_to < <(sql "SELECT extract(epoch FROM min(finished_at)) || ' ' || extract(epoch FROM max(finished_at))
	FROM trials WHERE finished_at >= to_timestamp($from)")
kill "$smi" 2>/dev/null
kill -TERM "$daemon"
for _ in $(seq 60); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.5; done
kill -KILL "$daemon" 2>/dev/null
wait "$daemon" 2>/dev/null
daemon=

# What each commit of the history carries, from its title (make-fusedops-history.sh), and where
# it must show: new regressions (check dtype) at that commit, regressions it fixes.
planted() { # TITLE -> "bug|new regressions|fixed|where"
	case $1 in
	"fusedops: softmax, rmsnorm and attention") echo "none: the clean start|||-" ;;
	"docs: a README") echo "none: the library untouched (its parent's build identity)|||-" ;;
	"softmax: sum float32 rows longer than 1024 four wide")
		echo "rare shapes: the sum skips cols % 4 tail columns when cols > 1024, f32 only|softmax.fwd f32||CPU (torch) and GPU (Triton kernel: _torch.sum_cols)" ;;
	"rmsnorm: 1/sqrt, and normalise before the weight")
		echo "none: the error moves within budget (must stay clean)|||CPU only: the GPU forward is the Triton kernel, which this change does not touch" ;;
	"attention: skip the zero fill of the last key tile's dv accumulator in bf16")
		echo "NaN dv on the last, partial key tile, bf16 only (forward, dq, dk fine)|attention.bwd bf16||CPU and GPU (the attention backward is torch code on both)" ;;
	"rmsnorm: split the dw reduction over chunks of 16 rows (atomics)")
		echo "a race: dw loses a chunk's update in about 8% of runs, f32 only|rmsnorm.bwd f32||CPU and GPU (torch code on both)" ;;
	"softmax: add the tail of the four-wide sum") echo "the fix of the rare-shape bug||softmax.fwd f32|CPU and GPU" ;;
	*) echo "?|?|?|?" ;;
	esac
}
ok_all=yes
planted_rows=
for i in "${!sha[@]}"; do
	IFS='|' read -r bug want fixes where <<<"$(planted "${title[$i]}")"
	got=$(sql "SELECT coalesce(string_agg(k.name || ' ' || s.dtype, ', ' ORDER BY k.name, s.dtype), '')
		FROM stats s JOIN checks k ON k.id = s.check_id JOIN commits c ON c.id = s.commit_id
		WHERE c.sha = '${sha[$i]}' AND s.verdict = 'regressed' AND s.regression_new")
	gotfix=$(sql "SELECT coalesce(string_agg(k.name || ' ' || r.dtype, ', ' ORDER BY k.name, r.dtype), '')
		FROM regressions r JOIN checks k ON k.id = r.check_id JOIN commits c ON c.id = r.fixed_commit_id
		WHERE c.sha = '${sha[$i]}'")
	if [[ $got == "$want" && $gotfix == "$fixes" ]]; then ok=yes; else ok='**no**'; ok_all=no; fi
	planted_rows+="| $((i + 1)) | ${sha[$i]:0:12} | ${title[$i]} | $bug | $where | ${want:--} | ${got:--} | ${fixes:--} | ${gotfix:--} | $ok |"$'\n'
done
# Failing trials outside the planted bugs' commits (history numbers) and check x dtype.
stray=$(sql "SELECT coalesce(string_agg(DISTINCT (c.position + 1) || ' ' || k.name || ' ' || t.dtype || ' ' || t.outcome, '; '), '')
	FROM trials t JOIN commits c ON c.id = t.commit_id JOIN checks k ON k.id = t.check_id
	WHERE t.outcome NOT IN ('pass', 'infra_error') AND NOT (
		(k.name = 'softmax.fwd' AND t.dtype = 'f32' AND c.position BETWEEN 2 AND 5)
		OR (k.name = 'attention.bwd' AND t.dtype = 'bf16' AND c.position BETWEEN 4 AND 6)
		OR (k.name = 'rmsnorm.bwd' AND t.dtype = 'f32' AND c.position BETWEEN 5 AND 6))")
culprit_commits=$(sql "SELECT count(DISTINCT culprit_id) FROM bisections WHERE outcome = 'culprit'")
mails_culprit=$(grep -c '^X-Numwatch-Kind: culprit' "$OUT/mbox" 2>/dev/null)
mails_all=$(grep -c '^From ' "$OUT/mbox" 2>/dev/null)
pending=$(sql "SELECT count(*) FROM mail WHERE state = 'pending'")

{
	if [[ $REHEARSAL == 1 ]]; then
		echo "## fusedops watched end to end: REHEARSAL on $(nproc) CPU cores, $(date -u +%Y-%m-%d) (no GPU: host slots, torch fallbacks)"
	else
		echo "## fusedops watched end to end on the GPU: $(date -u +%Y-%m-%d), $gpu"
	fi
	echo
	echo "Command: \`${knobs}bench/fusedops-gpu.sh\` (numwatch $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'));" \
		"slots \`$SLOTS\`, MPS $mps, per_commit $PER_COMMIT, max $MAX."
	echo
	echo "- Machine: ${gpu%%, *}, driver ${gpu##*, } ($(nproc) CPU cores); the runners' python3: \`$py\`: $versions."
	echo "- The runner's hello at commit 1 (as a slot starts it): \`$hello_short\`; fusedops backend: **$backend**."
	echo "- The history judged in ${history_s} s from the daemon's start; its bisections done and mail sent ${settle_s} s later."
	for n in "${notes[@]}"; do echo "- **$n**"; done
	echo
	echo "### Verdicts over the history"
	echo
	echo "Positions count from 0: commit N of make-fusedops-history.sh is position N - 1."
	echo
	gpu_verdicts_table
	echo
	echo "### The planted bugs, caught where they were planted"
	echo
	echo "*where*: where the bug can show (which code each backend runs). *new here*: regressions new at"
	echo "the commit, planted and found; *fixed here*: regressions the commit closed."
	echo
	echo "| # | commit | title | planted | where | new here: planted | found | fixed here: planted | found | as planted |"
	echo "| ---: | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	printf '%s' "$planted_rows"
	echo
	echo "Every commit as planted: **$ok_all**. Failing trials outside the bugs' commits and check x dtype" \
		"(softmax.fwd f32 at 3..6, attention.bwd bf16 at 5..7, rmsnorm.bwd f32 at 6..7): ${stray:-none}."
	echo
	echo "Each bug's signature at its commit:"
	echo
	sql "SELECT '- softmax.fwd f32 at 3: ' || count(*) || ' failing trials, ' || count(*) FILTER (WHERE shape[2] > 1024 AND shape[2] % 4 <> 0)
		|| ' of them with cols > 1024 and cols % 4 <> 0.' FROM trials t JOIN checks k ON k.id = t.check_id JOIN commits c ON c.id = t.commit_id
		WHERE c.position = 2 AND k.name = 'softmax.fwd' AND t.dtype = 'f32' AND t.outcome = 'fail'"
	sql "SELECT '- attention.bwd bf16 at 5: ' || count(*) || ' failing trials, ' || count(*) FILTER (WHERE (t.tensors -> 2 ->> 'nonfinite')::int > 0
		AND (t.tensors -> 0 ->> 'nonfinite')::int = 0 AND (t.tensors -> 1 ->> 'nonfinite')::int = 0
		AND (t.tensors -> 0 ->> 'ratio')::float8 <= 1 AND (t.tensors -> 1 ->> 'ratio')::float8 <= 1
		AND (t.tensors -> 2 -> 'worst' ->> 2)::int >= shape[3] - shape[3] % 64 AND shape[3] % 64 <> 0)
		|| ' of them with dv non-finite on the last, partial key tile only (dq, dk within budget).'
		FROM trials t JOIN checks k ON k.id = t.check_id JOIN commits c ON c.id = t.commit_id
		WHERE c.position = 4 AND k.name = 'attention.bwd' AND t.dtype = 'bf16' AND t.outcome = 'fail'"
	sql "SELECT '- rmsnorm.bwd f32 at 6: ' || count(*) FILTER (WHERE outcome = 'fail') || ' of ' || count(*) || ' trials failed ('
		|| round(100.0 * count(*) FILTER (WHERE outcome = 'fail') / greatest(count(*), 1), 1) || '%).'
		FROM trials t JOIN checks k ON k.id = t.check_id JOIN commits c ON c.id = t.commit_id
		WHERE c.position = 5 AND k.name = 'rmsnorm.bwd' AND t.dtype = 'f32'"
	echo
	echo "### Bisections"
	echo
	echo "| check | dtype | range | outcome | culprit | planted there | rounds | probe trials |"
	echo "| --- | --- | --- | --- | ---: | --- | ---: | ---: |"
	sql "SELECT '| ' || k.name || ' | ' || b.dtype || ' | ' || g.position || '..' || bd.position || ' | ' ||
		coalesce(b.outcome, b.state) || ' | ' || coalesce(cu.position::text, '-') || ' | ' ||
		CASE WHEN cu.id IS NULL THEN '-' WHEN (k.name, b.dtype, cu.position) IN (('softmax.fwd', 'f32', 2),
			('attention.bwd', 'bf16', 4), ('rmsnorm.bwd', 'f32', 5)) THEN 'yes' ELSE '**no**' END || ' | ' ||
		(SELECT count(DISTINCT round) FROM probes WHERE bisection_id = b.id) || ' | ' ||
		(SELECT coalesce(sum(trials), 0) FROM probes WHERE bisection_id = b.id) || ' |'
		FROM bisections b JOIN checks k ON k.id = b.check_id JOIN commits g ON g.id = b.good_commit_id
		JOIN commits bd ON bd.id = b.bad_commit_id LEFT JOIN commits cu ON cu.id = b.culprit_id ORDER BY b.id"
	echo
	echo "Culprit mails: ${mails_culprit:-0} for $culprit_commits culprit commits ($mails_all mails in the mbox," \
		"$pending pending): $(sql "SELECT coalesce(string_agg(kind || ' ' || subject, '; ' ORDER BY id), 'none') FROM mail")."
	echo
	echo "### $SEEDS seeds per check x dtype on commit 1 (${clean:0:12}, clean everywhere)"
	echo
	echo "Seeds 0 to $((SEEDS - 1)) of each pair (the plan's $PER_COMMIT reused). *failures*: any outcome but pass" \
		"and infra_error, every attempt (a false alarm: must be 0)."
	echo
	echo "| check | dtype | seeds | trials | failures | infra_error | worst ratio |"
	echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
	sql "SELECT '| ' || k.name || ' | ' || t.dtype || ' | ' || count(DISTINCT t.seed) || ' | ' || count(*) || ' | ' ||
		count(*) FILTER (WHERE t.outcome NOT IN ('pass', 'infra_error')) || ' | ' || count(*) FILTER (WHERE t.outcome = 'infra_error') ||
		' | ' || coalesce(round(max(t.ratio)::numeric, 3)::text, '-') || ' |'
		FROM trials t JOIN checks k ON k.id = t.check_id JOIN commits c ON c.id = t.commit_id
		WHERE c.sha = '$clean' AND t.seed < $SEEDS GROUP BY k.name, t.dtype ORDER BY 1"
	echo
	sql "SELECT 'All: ' || count(DISTINCT (t.check_id, t.dtype, t.seed)) || ' seeds, ' || count(*) || ' trials, **' ||
		count(*) FILTER (WHERE t.outcome NOT IN ('pass', 'infra_error')) || ' failures**.'
		FROM trials t JOIN commits c ON c.id = t.commit_id WHERE c.sha = '$clean' AND t.seed < $SEEDS"
	echo
	if [[ -n ${r_from:-} && -n ${r_to:-} ]]; then
		sql "SELECT 'Through the daemon (slots $SLOTS, MPS $mps): ' || count(*) || ' trials in ' ||
			round(($r_to - $r_from)::numeric, 1) || ' s (the first stored to the last, the database''s clock), ' ||
			round((count(*) / greatest($r_to - $r_from, 0.001))::numeric, 1) || ' trials/s; the runs done ${runs_s} s after the POSTs.'
			FROM trials WHERE finished_at >= to_timestamp($r_from) AND finished_at <= to_timestamp($r_to)"
		echo
		[[ $REHEARSAL != 1 ]] || echo "(Rehearsal: the busy figure is the stand-in nvidia-smi's.)"
		echo "GPU busy over that span (nvidia-smi utilization.gpu every 0.2 s): $(gpu_busy "$OUT/gpu-util.csv" "$r_from" "$r_to" 1)."
	else
		echo "No trials of the runs were stored."
	fi
	echo
	echo "Where each planted bug is expected: all three have the same code on the CPU and the GPU (the"
	echo "softmax's tail sum is _torch.sum_cols, which the Triton kernel takes as an argument; the"
	echo "attention and the rmsnorm backward are torch code on both), so each is expected at its commit"
	echo "on both; there is no GPU-only bug. Commit 4's change is to the torch forward of rmsnorm only:"
	echo "on the GPU, whose rmsnorm forward is the Triton kernel, it changes nothing measured."
} >"$report" 2>&1
cat "$report"
ls "$OUT"
