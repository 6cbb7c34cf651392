#!/usr/bin/env bash
# bench/gpu-suite.sh: the check suite on a real GPU, through the real daemon.
# Runs on the GPU host (no network, none of our libraries) from the repo root,
# with .gpu/ carried: debs/ (shared/tools/offline-debs + git, libjansson-dev),
# bin/numwatchd and the prebuilt runners of bench/gpu-prebuild.sh. It
#   1. runs numwatchd with GPU slot 0 over the demo history (per_commit seeds,
#      compute-sanitizer memcheck and racecheck on a schedule), and reports
#      every commit's verdicts: each planted bug must be caught at its commit;
#   2. runs TRIALS seeds of every check x dtype on the newest (clean) commit
#      through the daemon: false alarms, trials per second, GPU busy fraction;
#   3. times the C runner against plain PyTorch loops (bench/torch_loop.py).
# Everything it measures goes to $OUT (report.md, daemon.log, gpu-util.csv).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
G=$root/.gpu
OUT=${OUT:-$G/out}
TRIALS=${NW_GPU_TRIALS:-1000}
PER_COMMIT=${NW_GPU_PER_COMMIT:-64}
HISTORY_S=${NW_GPU_HISTORY_S:-300}
RUNS_S=${NW_GPU_RUNS_S:-240}
# Runner slots: several per GPU overlap one runner's host work with another's GPU work.
SLOTS=${NW_GPU_SLOTS:-0*8}
mkdir -p "$OUT"
report=$OUT/report.md
# shellcheck source=bench/gpu-common.sh
. "$root/bench/gpu-common.sh"
sql() { "$NW_PGBIN/psql" -XAtq -d "$db" -c "$1"; }

log "runtime packages"
gpu_runtime "$G"
nvidia-smi -L | tee "$OUT/gpu.txt"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)

log "postgresql"
# A fresh database and state every run: a warm machine keeps /tmp between runs.
rm -rf /tmp/nwstate
db=$(gpu_postgres /tmp/nwpg) || { echo "cannot start postgresql"; exit 1; }

log "config"
cat >/tmp/nw.conf <<CONF
[daemon]
state_dir = /tmp/nwstate
database = $db
[repository]
name = demo
url = $G/repo
poll_interval = 5
[build]
command = $(gpu_build_command "$G")
[trials]
per_commit = $PER_COMMIT
max = $TRIALS
timeout = 120
[sanitizer]
tools = memcheck, racecheck
every = $PER_COMMIT
commits = ${NW_GPU_SAN_COMMITS:-1000}
[slots]
slots = $SLOTS
[http]
port = 18080
public_url = http://127.0.0.1:18080/
[mail]
from = numwatch <numwatch@gpu.test>
to = dev@gpu.test
send_to_author = false
mbox = $OUT/mbox
CONF

# NW_GPU_MPS=1: the slots' runners share the GPU through CUDA MPS (a user-space
# daemon, stopped at the end) instead of time-slicing between their contexts.
mps=none
if [[ ${NW_GPU_MPS:-0} == 1 ]]; then
	gpu_mps_start
	trap gpu_mps_stop EXIT
fi
log "daemon: the demo history on GPU 0 (slots $SLOTS, MPS $mps)"
nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 500 >"$OUT/gpu-util.csv" 2>/dev/null &
smi=$!
"$G/bin/numwatchd" --config /tmp/nw.conf >"$OUT/daemon.log" 2>&1 &
daemon=$!
t0=$SECONDS
until [[ $(sql "SELECT count(*) > 0 AND count(*) FILTER (WHERE commit_verdict(id) = 'pending') = 0 FROM commits") == t &&
	$(sql "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running') AND kind <> 'probe'") == 0 ]]; do
	((SECONDS - t0 < HISTORY_S)) || { log "history: deadline passed"; break; }
	kill -0 $daemon 2>/dev/null || { log "daemon died"; tail -20 "$OUT/daemon.log"; break; }
	sleep 2
done
history_s=$((SECONDS - t0))
log "history done in ${history_s}s"

# NW_GPU_SKIP_RUNS=1: no extra seeds and no PyTorch comparison; the wait below still lets the
# bisections the history queued finish (their probes), up to RUNS_S.
if [[ ${NW_GPU_SKIP_RUNS:-0} == 1 ]]; then
	TRIALS=0
fi
log "daemon: $TRIALS seeds of every check x dtype on the newest commit"
newest=$(sql "SELECT sha FROM commits ORDER BY position DESC LIMIT 1")
sql "INSERT INTO tokens (name, hash) VALUES ('gpu', sha256(convert_to('nw_gpu_suite', 'UTF8'))) ON CONFLICT DO NOTHING"
# NW_GPU_BISECT="CHECK:DTYPE:GOOD:BAD" (positions): also a bisection by hand over that range.
if [[ -n ${NW_GPU_BISECT:-} ]]; then
	IFS=: read -r bcheck bdtype bgood bbad <<<"$NW_GPU_BISECT"
	echo "bisection by hand: $(gpu_post /api/v1/bisections "{\"good\": \"$(sql "SELECT sha FROM commits WHERE position = $bgood")\",
		\"bad\": \"$(sql "SELECT sha FROM commits WHERE position = $bbad")\", \"check\": \"$bcheck\", \"dtype\": \"$bdtype\"}")"
fi
runs_from=$(date +%s.%N)
for cd in $( ((TRIALS > 0)) && sql "SELECT k.name || ':' || d FROM checks k, unnest(k.dtypes) d ORDER BY 1"); do
	gpu_post /api/v1/runs "{\"commit\": \"$newest\", \"check\": \"${cd%%:*}\", \"dtype\": \"${cd##*:}\", \"trials\": $TRIALS}"
done >/dev/null
t0=$SECONDS
until [[ $(sql "SELECT count(*) FROM jobs WHERE kind = 'probe' AND state IN ('queued', 'running')") == 0 &&
	$(sql "SELECT count(*) FROM bisections WHERE state <> 'done'") == 0 ]]; do
	((SECONDS - t0 < RUNS_S)) || { log "runs: deadline passed"; break; }
	sleep 2
done
runs_to=$(date +%s.%N)
kill $smi 2>/dev/null
log "runs done in $((SECONDS - t0))s"
kill -TERM $daemon
wait $daemon

# Each culprit mail's repro command, run here on the GPU as a developer would (the CUDA runner
# the daemon built), then with 20 runs: a seed-bound failure fails every run.
log "the culprit mails' repro commands"
python3 - "$OUT/mbox" >/tmp/repros.txt <<'PY'
import mailbox, sys
for m in mailbox.mbox(sys.argv[1]):
    body = m.get_payload(decode=True).decode("utf-8", "replace")
    lines = body.splitlines()
    repro = next((l.strip() for l in lines if l.strip().startswith("numwatch repro ")), None)
    rate = " ".join(l.strip() for i, l in enumerate(lines) if l.strip().startswith("rate:")
                    or (i and lines[i - 1].strip().startswith("rate:") and l.startswith("           ")))
    if repro:
        print("\t".join([m["X-Numwatch-Bisection"] or "-", rate.replace("rate:", "").strip() or "-", repro]))
PY
: >"$OUT/repros.md"
while IFS=$'\t' read -r bis rate cmd; do
	args=${cmd#numwatch repro }
	# shellcheck disable=SC2086 # the mail's words are the arguments
	mail_out=$("$G/bin/numwatch" repro $args --cuda --config /tmp/nw.conf 2>&1 | tail -1)
	[[ $mail_out == numwatch:* ]] || mail_out=$(grep -o '"verdict": *"[a-z_]*"' <<<"$mail_out" || echo "${mail_out:0:80}")
	# shellcheck disable=SC2086
	many=$("$G/bin/numwatch" repro ${args% --runs *} --cuda --config /tmp/nw.conf --runs 20 2>&1 | tail -1)
	echo "| $bis | $rate | \`numwatch repro ${args}\` | ${mail_out} | ${many:0:80} |" >>"$OUT/repros.md"
done </tmp/repros.txt
# And a seed whose repeats differed at each culprit (a race's seed: not replayed, not in the mail),
# 20 runs: how often such a seed fails again on this GPU.
: >"$OUT/racy.md"
sql "SELECT DISTINCT ON (c.sha, k.name, b.dtype) c.sha || ' ' || k.name || ' ' || b.dtype || ' ' || t.seed
	FROM bisections b JOIN commits c ON c.id = b.culprit_id JOIN checks k ON k.id = b.check_id
	JOIN trials t ON t.commit_id = c.id AND t.check_id = k.id AND t.dtype = b.dtype
	WHERE b.outcome = 'culprit' AND t.digests_differ > 0 AND t.outcome = 'fail' AND t.sanitizer IS NULL
	ORDER BY c.sha, k.name, b.dtype, t.seed" |
	while read -r sha check dtype seed; do
		many=$("$G/bin/numwatch" repro --commit "$sha" --check "$check" --dtype "$dtype" --seed "$seed" --cuda \
			--config /tmp/nw.conf --runs 20 2>&1 | tail -1)
		echo "| ${sha:0:12} | $check | $dtype | $seed | ${many:0:80} |" >>"$OUT/racy.md"
	done

{
	echo "## GPU run: $(date -u +%Y-%m-%d), $gpu"
	echo
	echo "Command: \`bench/gpu-suite.sh\` (NW_GPU_TRIALS=$TRIALS, per_commit $PER_COMMIT, slots $SLOTS, MPS $mps), history in ${history_s}s."
	echo
	echo "### Verdicts over the demo history"
	echo
	gpu_verdicts_table
	echo
	echo "### Regressions"
	echo
	echo "| # | check | dtype | state | new at | fixed at | culprit mails for its culprit |"
	echo "| ---: | --- | --- | --- | ---: | ---: | ---: |"
	sql "SELECT '| ' || r.id || ' | ' || k.name || ' | ' || r.dtype || ' | ' || r.state || ' | ' || n.position || ' | '
		|| coalesce(f.position::text, '-') || ' | ' || (SELECT count(*) FROM mail m WHERE m.kind = 'culprit'
		AND m.culprit_id = r.culprit_id) || ' |' FROM regressions r JOIN checks k ON k.id = r.check_id
		JOIN commits n ON n.id = regression_start(r) LEFT JOIN commits f ON f.id = r.fixed_commit_id ORDER BY r.id"
	echo
	echo "### Failing seeds at the regressed commits, and those whose repeats differed"
	echo
	echo "A bisection replays the failing seeds first, but not a deterministic check's seeds whose two"
	echo "repeats gave different outputs (a race: daemon/bisector.c). *differed*: such seeds."
	echo
	echo "| # | check | dtype | deterministic | failing seeds | differed |"
	echo "| ---: | --- | --- | --- | ---: | ---: |"
	sql "SELECT '| ' || c.position || ' | ' || k.name || ' | ' || s.dtype || ' | ' || k.deterministic || ' | ' ||
		cardinality(s.failing_seeds) || ' | ' || (SELECT count(DISTINCT t.seed) FROM trials t WHERE t.commit_id = c.id
		AND t.check_id = k.id AND t.dtype = s.dtype AND t.seed = ANY (s.failing_seeds) AND t.digests_differ > 0) || ' |'
		FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
		WHERE s.verdict = 'regressed' ORDER BY c.position, k.name, s.dtype"
	echo
	echo "### Bisections the daemon queued by itself${NW_GPU_BISECT:+, and one by hand ($NW_GPU_BISECT)}"
	echo
	echo "*split*: rounds whose probe at one commit was split over several slots (parts)." \
		"*seeds*: what the bad commit's reruns said about its failing seeds (race: none replayed;" \
		"seed_bound: the reruns count as their replay there), with the reruns taken so; *f*: the flake" \
		"rate assumed (the good side's)."
	echo
	echo "| check | dtype | range | by | outcome | culprit | probe trials | failing-seed trials | split | seeds | f | log |"
	echo "| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | --- |"
	sql "SELECT '| ' || k.name || ' | ' || b.dtype || ' | ' || g.position || '..' || bd.position || ' | ' ||
		coalesce(b.requested_by, 'daemon') || ' | ' || coalesce(b.outcome, b.state) || ' | ' || coalesce((SELECT position::text FROM commits WHERE id = b.culprit_id), '-') ||
		' | ' || (SELECT coalesce(sum(trials), 0) FROM probes WHERE bisection_id = b.id) || ' | ' ||
		(SELECT coalesce(sum(trials), 0) FROM probes WHERE bisection_id = b.id AND failing_seeds) || ' | ' ||
		(SELECT count(*) FROM (SELECT 1 FROM probes WHERE bisection_id = b.id AND purpose = 'search'
		GROUP BY round, commit_id HAVING count(*) > 1) x) || ' | ' ||
		coalesce(b.posterior->>'seeds', '-') || coalesce(' (' || (b.posterior->>'replayed_reruns') || ')', '') ||
		' | ' || coalesce(round((b.posterior->>'flake_rate')::numeric, 4)::text, '-') || ' | ' ||
		coalesce((SELECT string_agg(e->>'msg', '; ') FROM jsonb_array_elements(b.log) e
		WHERE e->>'msg' LIKE '%not replayed%' OR e->>'msg' LIKE '%fresh seeds only%'), '') || ' |'
		FROM bisections b JOIN checks k ON k.id = b.check_id JOIN commits g ON g.id = b.good_commit_id
		JOIN commits bd ON bd.id = b.bad_commit_id ORDER BY b.id"
	echo
	echo "### The culprit mails' repro commands, run on this GPU"
	echo
	echo "Each culprit mail's \`numwatch repro\` command with \`--cuda --config\` added (the daemon's"
	echo "build of the culprit), its last line of output; then the same seed 20 times (\`--runs 20\`)."
	echo
	echo "| bisection | rate (the mail's words) | repro | its result | 20 runs |"
	echo "| ---: | --- | --- | --- | --- |"
	cat "$OUT/repros.md"
	echo
	echo "A failing seed whose two repeats differed at each culprit (a race's seed: not replayed, not"
	echo "the mail's), 20 runs of it:"
	echo
	echo "| culprit | check | dtype | seed | 20 runs |"
	echo "| --- | --- | --- | ---: | --- |"
	cat "$OUT/racy.md"
	echo
	echo "### $TRIALS seeds per check x dtype on the newest commit ($newest)"
	echo
	echo "| check | dtype | trials | failures | worst ratio |"
	echo "| --- | --- | ---: | ---: | ---: |"
	sql "SELECT '| ' || k.name || ' | ' || t.dtype || ' | ' || count(DISTINCT t.seed) || ' | ' ||
		count(*) FILTER (WHERE t.outcome NOT IN ('pass', 'infra_error') AND t.sanitizer IS NULL) || ' | ' ||
		round(max(t.ratio)::numeric, 3) || ' |'
		FROM trials t JOIN checks k ON k.id = t.check_id JOIN commits c ON c.id = t.commit_id
		WHERE c.sha = '$newest' AND t.seed >= $PER_COMMIT AND t.sanitizer IS NULL GROUP BY k.name, t.dtype ORDER BY 1"
	echo
	# The slots run several checks at once: one rate for the whole run, not per check.
	sql "SELECT 'Through the daemon (slots $SLOTS): ' || count(*) || ' trials stored in ' ||
		round(($runs_to - $runs_from)::numeric, 1) || ' s, ' || round((count(*) / ($runs_to - $runs_from))::numeric, 1) ||
		' trials/s; the kernels under test ran ' || round((sum(kernel_us) / 1e6 / ($runs_to - $runs_from))::numeric, 3) ||
		' of the wall time.'
		FROM trials WHERE sanitizer IS NULL AND finished_at >= to_timestamp($runs_from) AND finished_at <= to_timestamp($runs_to)"
	echo
	echo "### compute-sanitizer runs"
	echo
	echo "| commit | check | dtype | tool | clean | report | skipped |"
	echo "| --- | --- | --- | --- | ---: | ---: | ---: |"
	sql "SELECT '| ' || c.position || ' ' || left(c.title, 40) || ' | ' || k.name || ' | ' || t.dtype || ' | ' || t.sanitizer || ' | ' ||
		count(*) FILTER (WHERE sanitizer_status = 'clean') || ' | ' || count(*) FILTER (WHERE sanitizer_status = 'report') || ' | ' ||
		count(*) FILTER (WHERE sanitizer_status = 'skipped') || ' |' FROM trials t JOIN checks k ON k.id = t.check_id
		JOIN commits c ON c.id = t.commit_id WHERE t.sanitizer IS NOT NULL GROUP BY c.position, c.title, k.name, t.dtype, t.sanitizer
		ORDER BY 1"
	echo
	echo "### GPU busy during the $TRIALS-seed runs"
	echo
	python3 - "$OUT/gpu-util.csv" "$runs_from" "$runs_to" <<'PY'
import sys, datetime
path, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
vals = []
for line in open(path):
    try:
        ts, util = [x.strip() for x in line.split(",")]
        t = datetime.datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        continue
    if t0 <= t <= t1:
        vals.append(float(util))
if vals:
    print("nvidia-smi utilization.gpu: mean %.1f%% over %d samples (every 0.5 s)" % (sum(vals) / len(vals), len(vals)))
else:
    print("nvidia-smi utilization.gpu: no samples")
PY
} >"$report" 2>&1

if [[ ${NW_GPU_SKIP_RUNS:-0} == 1 ]]; then
	cat "$report"
	scripts/pgcluster stop /tmp/nwpg >/dev/null 2>&1
	exit 0
fi
log "C runner against plain PyTorch loops"
blob=$(cat "$G/prebuilt/$newest")
mkdir -p /tmp/nwrun && python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' \
	"$G/blobs/$blob/numwatch-runner-cuda.xz" /tmp/nwrun/numwatch-runner-cuda && chmod +x /tmp/nwrun/numwatch-runner-cuda
{
	echo
	echo "### Trials per second: numwatch's C runner against a plain PyTorch loop (500 trials, 5 rounds)"
	echo
	echo "One process each, taking turns on an otherwise idle GPU: each round runs the PyTorch loop, then"
	echo "the C runner on the same check x dtype, so a pair shares the machine's state. Both leave out"
	echo "start-up and warm-up: the PyTorch loop is timed after 5 warm-up trials, the C runner's rate is"
	echo "its own (NW_TIMING=1: from the end of its first trial to the end of its last). *ratio*: the"
	echo "median of the five rounds' C / PyTorch ratios, brackets the lowest and highest round."
	echo
	echo "| check | dtype | C runner trials/s | PyTorch loop trials/s | ratio (median of rounds) |"
	echo "| --- | --- | ---: | ---: | ---: |"
	: >/tmp/rates.txt
	for round in 1 2 3 4 5; do
		python3 bench/torch_loop.py --trials 500 --checks softmax.fwd,attention.fwd --dtypes f32,bf16 >/tmp/torch.txt 2>&1 || cat /tmp/torch.txt
		while read -r _ check dtype n sec rate _; do
			c=$(NW_TIMING=1 /tmp/nwrun/numwatch-runner-cuda --check "$check" --dtype "$dtype" --seed 1000 --count "$n" 2>&1 >/dev/null |
				awk '/trials\/s from the end/ {print $2}')
			echo "$check $dtype ${c:-0} $rate" >>/tmp/rates.txt
		done < <(grep '^torch ' /tmp/torch.txt)
	done
	python3 - /tmp/rates.txt <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    check, dtype, c, t = line.split()
    rows.setdefault((check, dtype), []).append((float(c), float(t)))
for (check, dtype), v in rows.items():
    cs, ts, rs = [x[0] for x in v], [x[1] for x in v], [x[0] / x[1] for x in v]
    print("| %s | %s | %.1f [%.0f-%.0f] | %.1f [%.0f-%.0f] | %.2f [%.2f-%.2f] |" % (
        check, dtype, statistics.median(cs), min(cs), max(cs), statistics.median(ts), min(ts), max(ts),
        statistics.median(rs), min(rs), max(rs)))
PY
	echo
	echo "### Where a C runner's trial goes (NW_TIMING=1, 500 trials, microseconds per trial)"
	echo
	echo '```'
	for cd in $(sql "SELECT k.name || ':' || d FROM checks k, unnest(k.dtypes) d ORDER BY 1"); do
		printf '%-14s %-5s ' "${cd%%:*}" "${cd##*:}"
		NW_TIMING=1 /tmp/nwrun/numwatch-runner-cuda --check "${cd%%:*}" --dtype "${cd##*:}" --seed 1000 --count 500 2>&1 >/dev/null |
			grep '^timing: [0-9]* trials,' | sed 's/^timing: //' 
	done
	echo '```'
	echo
	echo "### GPU references against host references (tests/gpu/gpu_refs, 200 seeds per check x dtype)"
	echo
	echo '```'
	"$G/bin/gpu_refs" 200
	echo '```'
} >>"$report" 2>&1
cat "$report"
scripts/pgcluster stop /tmp/nwpg >/dev/null 2>&1
