#!/usr/bin/env bash
# bench/multi-gpu.sh: one numwatchd with slots on every GPU of a host (issue 18).
# Runs on the GPU host from the repo root with .gpu/ carried (bench/gpu-prebuild.sh, then
# shared/tools/offline-debs .gpu/debs git libjansson-dev). With CUDA MPS on, it
#   1. runs the demo history through one daemon with PER_GPU slots on each of the host's GPUs
#      (slots 0*K, 1*K, ...): every commit's verdicts, the regressions, and the bisections the
#      daemon queued, with the GPUs each bisection's probes ran on (k-section across GPUs);
#   2. for 1, 2, 4, ... GPUs (up to the host's): a fresh database, the newest commit only, and
#      SCALE_TRIALS seeds (10000) of every check x dtype: trials per second through the daemon and each
#      GPU's busy fraction (nvidia-smi, every 0.2 s).
# Everything goes to $OUT: report.md, the daemons' logs, gpu-util.csv.
# NW_GPU_STORE_CONNECTIONS=N sets the daemon's [store] connections (default: its own, one per 8
# slots, 2 to 8).
# NW_GPU_REHEARSAL=1 rehearses it on a machine without GPUs: the GPU slots run the host runner
# and say how many GPUs there are ([slots] gpus), with stand-ins for nvidia-smi and
# nvidia-cuda-mps-control first on PATH; so that device time is spent on a script that runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
G=$root/.gpu
OUT=${OUT:-$G/out}
TRIALS=${NW_GPU_TRIALS:-1000}
# Seeds per check x dtype in the throughput phases: enough that the span is trials, not set-up.
SCALE_TRIALS=${NW_GPU_SCALE_TRIALS:-10000}
PER_COMMIT=${NW_GPU_PER_COMMIT:-64}
PER_GPU=${NW_GPU_PER_GPU:-8}
HISTORY_S=${NW_GPU_HISTORY_S:-150}
RUNS_S=${NW_GPU_RUNS_S:-60}
mkdir -p "$OUT"
report=$OUT/report.md
# shellcheck source=bench/gpu-common.sh
. "$root/bench/gpu-common.sh"
sql() { "$NW_PGBIN/psql" -XAtq -d "$db" -c "$1"; }

gpu_runtime "$G"
# The stand-ins for nvidia-smi and nvidia-cuda-mps-control the header promises a rehearsal.
[[ ${NW_GPU_REHEARSAL:-0} != 1 ]] || gpu_rehearsal_fakes
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
log "$ngpu x $gpu"
pg=$(gpu_postgres /tmp/nwpg) || { echo "cannot start postgresql"; exit 1; }
# pg_stat_statements: which statements took the server's time in each throughput phase.
pgsql() { "$NW_PGBIN/psql" -XAtq -d "$pg" -c "$1"; }
if ! { pgsql "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" >/dev/null &&
	scripts/pgcluster restart /tmp/nwpg >/dev/null && pgsql "CREATE EXTENSION pg_stat_statements" >/dev/null; }; then
	log "no pg_stat_statements"
fi
gpu_mps_start
gpu_util_start "$OUT/gpu-util.csv"
daemon=
# shellcheck disable=SC2317 # run by the trap
finish() {
	[[ -z $daemon ]] || kill -TERM "$daemon" 2>/dev/null
	kill "$smi" 2>/dev/null
	gpu_mps_stop
	scripts/pgcluster stop /tmp/nwpg >/dev/null 2>&1
}
trap finish EXIT

# slots_for N: PER_GPU slots on each of GPUs 0 to N-1.
slots_for() {
	local i s=
	for ((i = 0; i < $1; i++)); do s+="${s:+, }$i*$PER_GPU"; done
	echo "$s"
}

# run_daemon NAME SLOTS HISTORY_MAX: a fresh database NAME and state, the daemon started on them.
run_daemon() {
	"$NW_PGBIN/psql" -XAtq -d "$pg" -c "CREATE DATABASE $1" >/dev/null || return 1
	name=$1
	db=$(sed "s/dbname=[^ ]*/dbname=$1/" <<<"$pg")
	rm -rf "/tmp/nwstate-$1"
	cat >"/tmp/$1.conf" <<CONF
[daemon]
state_dir = /tmp/nwstate-$1
database = $db
[repository]
name = demo
url = $G/repo
poll_interval = 2
history_max = $3
[build]
command = $(gpu_build_command "$G")
$( [[ ${NW_GPU_REHEARSAL:-0} != 1 ]] || echo "runner_cuda = numwatch-runner-host")
[trials]
per_commit = $PER_COMMIT
max = $((TRIALS > SCALE_TRIALS ? TRIALS : SCALE_TRIALS))
timeout = 120
[slots]
slots = $2
$( [[ ${NW_GPU_REHEARSAL:-0} != 1 ]] || echo "gpus = $ngpu")
$( [[ -z ${NW_GPU_STORE_CONNECTIONS:-} ]] || printf '[store]\nconnections = %s\n' "$NW_GPU_STORE_CONNECTIONS")
[http]
port = 18080
public_url = http://127.0.0.1:18080/
[mail]
from = numwatch <numwatch@gpu.test>
to = dev@gpu.test
send_to_author = false
mbox = $OUT/mbox-$1
CONF
	"$G/bin/numwatchd" --config "/tmp/$1.conf" >"$OUT/daemon-$1.log" 2>&1 &
	daemon=$!
	# The token once the daemon serves (its migrations done: an insert during them could deadlock).
	local t0=$SECONDS
	until python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:18080/api/v1/health", timeout=2)' 2>/dev/null &&
		sql "INSERT INTO tokens (name, hash) VALUES ('gpu', sha256(convert_to('nw_gpu_suite', 'UTF8')))
		ON CONFLICT DO NOTHING" >/dev/null 2>&1; do
		((SECONDS - t0 < 30)) && kill -0 "$daemon" 2>/dev/null || { cat "$OUT/daemon-$1.log"; return 1; }
		sleep 0.2
	done
}

# slot_time FILE: the daemon's slot-time counters and trials now (/metrics), with the host's CPU
# time (/proc/stat: all of it, and idle) and the daemon's (/proc/PID/stat, and its loop thread's),
# for slot_shares.
slot_time() {
	python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:18080/metrics", timeout=5).read().decode())' 2>/dev/null |
		grep -E '^numwatch_(slot_seconds|slot_trial_seconds|loop_idle_seconds|trials)_total' >"$1" || true
	echo "wall $(date +%s.%N)" >>"$1"
	python3 - "$daemon" >>"$1" <<'PY'
import os, sys
hz = os.sysconf("SC_CLK_TCK")
# user nice system idle iowait irq softirq steal (guest time is counted in user and nice already)
f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
print("host_cpu %.2f %.2f" % (sum(f) / hz, (f[3] + f[4]) / hz))
def cpu(path):
    try:
        s = open(path).read()
    except OSError:
        return -1
    s = s[s.rindex(")") + 2:].split()
    return (int(s[11]) + int(s[12])) / hz
pid = sys.argv[1]
print("daemon_cpu %.2f" % cpu("/proc/%s/stat" % pid))
print("loop_cpu %.2f" % cpu("/proc/%s/task/%s/stat" % (pid, pid)))
# The runners' and PostgreSQL's CPU, by process name (a runner that exits between the samples
# takes its share with it: in a phase of runs by hand the runners live through it).
group = {"runners": 0.0, "postgres": 0.0}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            comm = open("/proc/%s/comm" % p).read().strip()
        except OSError:
            continue
        name = "runners" if comm.startswith("numwatch-runne") else "postgres" if comm == "postgres" else None
        if name:
            group[name] += max(cpu("/proc/%s/stat" % p), 0)
print("runners_cpu %.2f" % group["runners"])
print("postgres_cpu %.2f" % group["postgres"])
PY
}
# slot_shares BEFORE AFTER: each state's share of the slot time between the two samples, then
# (a column of its own) the host's CPU busy share and the daemon's CPU seconds per 1000 answers
# (its loop thread's in brackets): whether the host's cores or the daemon's one thread limit.
slot_shares() {
	python3 - "$1" "$2" <<'PY'
import re, sys
def read(path):
    v = {}
    for line in open(path):
        m = re.match(r'numwatch_(?:slot_seconds_total\{state="(\w+)"\}|slot_(trial)_seconds_total|(loop)_idle_seconds_total|(wall)) ([0-9.]+)', line)
        if m:
            v[m.group(1) or m.group(2) or m.group(3) or m.group(4)] = float(m.group(5))
        elif line.startswith("numwatch_trials_total"):
            v["answers"] = v.get("answers", 0) + float(line.rsplit(" ", 1)[1])
        elif line.split()[0] in ("wall", "daemon_cpu", "loop_cpu", "runners_cpu", "postgres_cpu"):
            v[line.split()[0]] = float(line.split()[1])
        elif line.startswith("host_cpu "):
            v["host_all"], v["host_idle"] = (float(x) for x in line.split()[1:3])
    return v
a, b = read(sys.argv[1]), read(sys.argv[2])
d = {k: b[k] - a.get(k, 0) for k in b}
extra = {k: d.pop(k, None) for k in ("loop", "wall", "answers", "daemon_cpu", "loop_cpu", "runners_cpu",
                                      "postgres_cpu", "host_all", "host_idle")}
loop, wall = extra["loop"], extra["wall"] or 0
cpu = "n/a"
if extra["host_all"]:
    cpu = "host CPU %.0f%% busy" % (100 * (1 - extra["host_idle"] / extra["host_all"]))
    if extra["answers"] and extra["daemon_cpu"] is not None and min(a.get("daemon_cpu", -1), b.get("daemon_cpu", -1)) >= 0:
        cpu += "; daemon %.3f CPU s per 1000 answers (loop thread %.3f)" % (
            1000 * extra["daemon_cpu"] / extra["answers"], 1000 * extra["loop_cpu"] / extra["answers"])
    if extra["answers"] and extra["runners_cpu"] is not None:
        cpu += "; runners %.0f µs, PostgreSQL %.0f µs of CPU a trial" % (
            1e6 * extra["runners_cpu"] / extra["answers"], 1e6 * (extra["postgres_cpu"] or 0) / extra["answers"])
# Idle is left out: slots wait for work at the phase's ends (the samples are a poll apart).
total = sum(x for k, x in d.items() if k not in ("trial", "idle"))
if not total:
    print("n/a | " + cpu); sys.exit()
d["between trials"] = d.get("running", 0) - d.get("trial", 0)
order = ["trial", "between trials", "claiming", "loading", "starting", "finishing", "restarting"]
print(", ".join("%s %.0f%%" % (k, 100 * d[k] / total) for k in order if d.get(k, 0) / total >= 0.005) +
      ("; daemon loop busy %.0f%%" % (100 * (1 - loop / wall)) if loop is not None and wall > 0 else "") +
      " | " + cpu)
PY
}

# wait_for SECONDS WHAT SQL: until SQL says t, the daemon dies or the deadline passes.
wait_for() {
	local t0=$SECONDS
	until [[ $(sql "$3" 2>/dev/null) == t ]]; do
		((SECONDS - t0 < $1)) || { log "$2: deadline passed"; return 1; }
		kill -0 "$daemon" 2>/dev/null || { log "$2: the daemon died"; tail -5 "$OUT/daemon-$name.log"; return 1; }
		sleep 1
	done
}
judged="SELECT count(*) > 0 AND count(*) FILTER (WHERE commit_verdict(id) = 'pending') = 0 FROM commits"
idle="SELECT count(*) = 0 FROM jobs WHERE state IN ('queued', 'running')"

# 1. The demo history on every GPU (NW_GPU_SKIP_HISTORY=1: only the throughput phases).
slots=$(slots_for "$ngpu")
: >"$report"
if [[ ${NW_GPU_SKIP_HISTORY:-0} != 1 ]]; then
log "the demo history, slots $slots, MPS $mps"
run_daemon history "$slots" 500 || exit 1
t0=$SECONDS
wait_for "$HISTORY_S" "history" "$judged"
history_s=$((SECONDS - t0))
# Done: every bisection, and every culprit's mail written (the mailer queues it a moment after).
wait_for "$RUNS_S" "bisections" "SELECT ($idle) AND count(*) FILTER (WHERE state <> 'done') = 0
	AND NOT EXISTS (SELECT 1 FROM mail WHERE state = 'pending')
	AND NOT EXISTS (SELECT 1 FROM bisections b WHERE b.outcome = 'culprit'
		AND NOT EXISTS (SELECT 1 FROM mail m WHERE m.culprit_id = b.culprit_id AND m.kind = 'culprit'))
	FROM bisections"
kill -TERM "$daemon"
wait "$daemon"
daemon=
{
	echo "## One numwatchd on $ngpu GPUs: $(date -u +%Y-%m-%d), $ngpu x $gpu"
	echo
	echo "Command: \`bench/multi-gpu.sh\` (slots \`$slots\`, MPS $mps, per_commit $PER_COMMIT), history judged in ${history_s} s."
	echo
	echo "### Verdicts over the demo history"
	echo
	gpu_verdicts_table
	echo
	echo "Trials per GPU over the history: $(sql "SELECT string_agg(g || ': ' || n, ', ' ORDER BY g) FROM
		(SELECT split_part(slot, '.', 1) g, count(*) n FROM trials GROUP BY 1) x")."
	echo
	echo "### Bisections the daemon queued"
	echo
	echo "*GPUs per round*: for each search round, how many GPUs its probes' trials ran on (a probe"
	echo "per slot: the rounds are k-sections over every GPU's slots)."
	echo
	echo "| check | dtype | range | outcome | culprit | rounds | probes | probe trials | GPUs per round |"
	echo "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |"
	sql "SELECT '| ' || k.name || ' | ' || b.dtype || ' | ' || g.position || '..' || bd.position || ' | ' ||
		coalesce(b.outcome, b.state) || ' | ' || coalesce((SELECT position::text FROM commits WHERE id = b.culprit_id), '-') ||
		' | ' || (SELECT count(DISTINCT round) FROM probes WHERE bisection_id = b.id) || ' | ' ||
		(SELECT count(*) FROM probes WHERE bisection_id = b.id) || ' | ' ||
		(SELECT coalesce(sum(trials), 0) FROM probes WHERE bisection_id = b.id) || ' | ' ||
		coalesce((SELECT string_agg(n::text, ' ' ORDER BY round) FROM (SELECT p.round, count(DISTINCT split_part(t.slot, '.', 1)) n
			FROM probes p JOIN trials t ON t.commit_id = p.commit_id AND t.check_id = b.check_id AND t.dtype = b.dtype
			AND t.seed = ANY (p.seeds) AND t.finished_at BETWEEN p.created_at AND coalesce(p.finished_at, now())
			WHERE p.bisection_id = b.id GROUP BY p.round) r), '-') || ' |'
		FROM bisections b JOIN checks k ON k.id = b.check_id JOIN commits g ON g.id = b.good_commit_id
		JOIN commits bd ON bd.id = b.bad_commit_id ORDER BY b.id"
	echo
	echo "Culprit mails: $(grep -c '^X-Numwatch-Kind: culprit' "$OUT/mbox-history" 2>/dev/null || echo 0);" \
		"fixed follow-ups: $(grep -c '^X-Numwatch-Kind: fixed' "$OUT/mbox-history" 2>/dev/null || echo 0)" \
		"(one per culprit and fixing commit)."
	echo
} >"$report" 2>&1
cat "$report"
fi

# 2. Throughput with 1, 2, 4, ... GPUs: TRIALS seeds of every check x dtype on the newest commit.
echo "### $SCALE_TRIALS seeds per check x dtype on the newest commit, by the number of GPUs" >>"$report"
echo >>"$report"
echo "Span: from the first trial of the run stored to the last (the database's clock)." >>"$report"
echo >>"$report"
echo "*Slot time*: where the slots' time went over the phase (the daemon's /metrics,"  >>"$report"
echo "numwatch_slot_seconds_total): a trial in flight, between trials of a job, and claiming,"  >>"$report"
echo "loading, finishing a job (shares of the time the slots were not idle)." >>"$report"
echo >>"$report"
echo "*Host CPU*: the host's cores' busy share over the phase (/proc/stat), and the daemon's CPU"  >>"$report"
echo "seconds per 1000 answers (/proc/PID/stat; its event loop's thread in brackets): a host whose" >>"$report"
echo "cores are busy slows the loop from outside, a loop near one core's second per second is the" >>"$report"
echo "limit itself. Then the runners' and PostgreSQL's CPU a trial (/proc, by process name): a" >>"$report"
echo "runner's host work that grows with the GPUs is the host's cores (or memory) shared." >>"$report"
echo >>"$report"
echo "| GPUs | slots | trials | failures | seconds | trials/s | per GPU | busy per GPU (nvidia-smi) | slot time | host CPU |" >>"$report"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |" >>"$report"
for ((n = 1; n <= ngpu; n *= 2)); do
	log "throughput on $n GPU(s)"
	run_daemon "gpus$n" "$(slots_for "$n")" 1 || break
	wait_for 60 "plan on $n GPUs" "SELECT ($judged) AND ($idle)" || { kill "$daemon"; wait "$daemon"; daemon=; continue; }
	newest=$(sql "SELECT sha FROM commits ORDER BY position DESC LIMIT 1")
	from=$(date +%s.%N)
	for cd in $(sql "SELECT k.name || ':' || d FROM checks k, unnest(k.dtypes) d ORDER BY 1"); do
		gpu_post /api/v1/runs "{\"commit\": \"$newest\", \"check\": \"${cd%%:*}\", \"dtype\": \"${cd##*:}\", \"trials\": $SCALE_TRIALS}"
	done >/dev/null
	slot_time "$OUT/slots-before"
	pgsql "SELECT pg_stat_statements_reset()" >/dev/null 2>&1
	wait_for "$RUNS_S" "runs on $n GPUs" "$idle"
	slot_time "$OUT/slots-after"
	# The span of the run's own trials (the plan's were stored before 'from').
	read -r from to < <(sql "SELECT extract(epoch FROM min(finished_at)) || ' ' || extract(epoch FROM max(finished_at))
		FROM trials WHERE finished_at >= to_timestamp($from)")
	kill -TERM "$daemon"
	wait "$daemon"
	daemon=
	row=$(sql "SELECT count(*) || ' | ' || count(*) FILTER (WHERE outcome NOT IN ('pass', 'infra_error')) || ' | ' ||
		round(($to - $from)::numeric, 1) || ' | ' || round((count(*) / ($to - $from))::numeric) || ' | ' ||
		round((count(*) / ($to - $from) / $n)::numeric)
		FROM trials WHERE finished_at >= to_timestamp($from) AND finished_at <= to_timestamp($to)")
	busy=$(gpu_busy "$OUT/gpu-util.csv" "$from" "$to" "$n")
	echo "| $n | \`$(slots_for "$n")\` | $row | $busy | $(slot_shares "$OUT/slots-before" "$OUT/slots-after") |" >>"$report"
	pgsql "SELECT '$n GPU(s): ' || round(total_exec_time::numeric) || ' ms, ' || calls || ' calls: ' ||
		left(regexp_replace(query, '\s+', ' ', 'g'), 100) FROM pg_stat_statements
		WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC LIMIT 6" >>"$OUT/pg-top" 2>/dev/null
done
rm -f "$OUT/slots-before" "$OUT/slots-after"
echo >>"$report"
if [[ -s $OUT/pg-top ]]; then
	{
		echo
		echo "PostgreSQL's statements by server time in each phase (pg_stat_statements):"
		echo
		echo '```'
		cat "$OUT/pg-top"
		echo '```'
	} >>"$report"
	rm -f "$OUT/pg-top"
fi
tail -n +"$(grep -n "^### $SCALE_TRIALS seeds" "$report" | cut -d: -f1)" "$report"
