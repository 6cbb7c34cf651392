#!/usr/bin/env bash
# bench/planted-histories.sh [BUILD_DIR] [RUNS]: what users judge numwatch by,
# on histories with planted bugs, through the real numwatchd (two host slots,
# a private PostgreSQL, mail to an mbox; tests/lib):
#   - wrong blames: culprits named (bisections ending 'culprit') that are not
#     the planted commit (must be 0);
#   - culprit mails per culprit commit (must be exactly 1);
#   - new-regression verdicts (regression_new) at commits that planted nothing
#     (must be 0), and planted bugs with no regression new at them.
# Histories, RUNS times each with the planted commits drawn at random:
#   race      fake.bwd fails 3% of its trials at random (flaky3) from commit K
#             of 40 on, never fixed;
#   seedbound fake.fwd fails seeds 3, 11, 19, ... (failing) from commit K of 24
#             on, and fake.bwd fails 5% from commit L on (two culprits);
#   demo      the demo kernel library's history (kernels/demolib-history, the
#             host build) and its planted bugs: softmax's 4-wide path, the
#             attention bf16 backward's full key tiles, msda's skipped points
#             and the attention forward's missing barrier (no race on the host:
#             not counted as missed). Once, whatever RUNS says.
# HISTORIES (default "race seedbound demo") picks some. Prints one line per run and the totals. docs/benchmarks.md "Regressions on
# planted histories".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export NW_BUILD_DIR=${1:-$root/build} NW_SOURCE_DIR=$root
runs=${2:-3}
[[ -x $NW_BUILD_DIR/daemon/numwatchd ]] || {
	echo "planted-histories.sh: no numwatchd in '$NW_BUILD_DIR'" >&2
	exit 1
}

# one_run NAME: builds the history, runs the daemon until every regression is settled,
# prints "wrong_blames culprit_commits culprit_mails stray_new missed".
one_run() (
	. "$root/tests/lib/pg.sh"
	. "$root/tests/lib/daemon.sh"
	work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-planted.XXXXXX")
	nw_atexit rm -rf "$work"
	repo=$work/repo
	git init -q -b main "$repo"
	local planted
	case $1 in
	race)
		local k=$((3 + RANDOM % 30)) i
		for ((i = 0; i < 40; i++)); do
			echo good >"$repo/mode"
			if ((i >= k)); then echo flaky3; else echo good; fi >"$repo/bwd_mode"
			echo "$i" >"$repo/version"
			nw_commit "$repo" "$i"
		done
		planted="$k"
		;;
	seedbound)
		local k=$((2 + RANDOM % 20)) l=$((2 + RANDOM % 20)) i
		for ((i = 0; i < 24; i++)); do
			if ((i >= k)); then echo failing; else echo good; fi >"$repo/mode"
			if ((i >= l)); then echo flaky5; else echo good; fi >"$repo/bwd_mode"
			echo "$i" >"$repo/version"
			nw_commit "$repo" "$i"
		done
		planted="$k $l"
		;;
	esac
	pg_start
	NW_PORT=$(nw_free_port)
	nw_mode_conf "$work/nw.conf" planted "$repo" 64 1024 "public_url = http://numwatch.test/
[mail]
from = numwatch <numwatch@example.org>
to = dev@example.org
send_to_author = false
mbox = $work/mbox"
	nw_daemon_start "$work/nw.conf" "$work/daemon.log"
	settled() {
		nw_all_final && [[ $(pg_psql "SELECT count(*) FROM bisections WHERE state <> 'done'") == 0 &&
			$(pg_psql "SELECT count(*) FROM regressions WHERE state IN ('open', 'bisecting')") == 0 ]]
	}
	nw_wait 3600 "every regression settled" settled
	# The culprit mails are queued by the sweep once every bisection is done.
	mails_settled() {
		[[ $(pg_psql "SELECT count(*) FROM bisections b WHERE b.outcome = 'culprit' AND NOT EXISTS
			(SELECT 1 FROM mail m WHERE m.culprit_id = b.culprit_id AND m.kind = 'culprit' AND m.state = 'sent')") == 0 ]]
	}
	nw_wait 120 "every culprit mailed" mails_settled
	local in_list
	in_list=$(tr ' ' ',' <<<"$planted")
	pg_psql "SELECT
		(SELECT count(*) FROM bisections b JOIN commits c ON c.id = b.culprit_id
		 WHERE b.outcome = 'culprit' AND c.position NOT IN ($in_list)),
		(SELECT count(DISTINCT culprit_id) FROM bisections WHERE outcome = 'culprit'),
		(SELECT count(*) FROM mail WHERE kind = 'culprit' AND state = 'sent'),
		(SELECT count(*) FROM stats s JOIN commits c ON c.id = s.commit_id
		 WHERE s.regression_new AND c.position NOT IN ($in_list)),
		(SELECT count(*) FROM unnest(ARRAY[$in_list]) p WHERE NOT EXISTS (SELECT 1 FROM stats s
		 JOIN commits c ON c.id = s.commit_id WHERE s.regression_new AND c.position = p))" | tr '|' ' '
	echo "planted at $planted; fake.fwd/fake.bwd verdicts (* new):" >&2
	pg_psql "SELECT string_agg(c.position || ':' || left(s.verdict, 3) || CASE WHEN s.regression_new THEN '*' ELSE '' END,
		' ' ORDER BY k.name, c.position) FROM stats s JOIN commits c ON c.id = s.commit_id
		JOIN checks k ON k.id = s.check_id" >&2
)

demo_run() (
	. "$root/tests/lib/pg.sh"
	. "$root/tests/lib/daemon.sh"
	work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-planted-demo.XXXXXX")
	nw_atexit rm -rf "$work"
	"$root/scripts/make-demo-repo" "$work/repo" >/dev/null
	pg_start
	NW_PORT=$(nw_free_port)
	cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = demo
url = $work/repo
poll_interval = 2
[build]
command = cmake -S "$root/kernels" -B "\$NUMWATCH_BUILD_DIR" -DNW_LIBRARY_DIR="\$NUMWATCH_WORKTREE" -DNW_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "\$NUMWATCH_BUILD_DIR" -j2
timeout = 900
[trials]
per_commit = 64
[slots]
slots = host, host
[http]
port = $NW_PORT
public_url = http://numwatch.test/
[mail]
from = numwatch <numwatch@example.org>
to = dev@example.org
send_to_author = false
mbox = $work/mbox
CONF
	nw_daemon_start "$work/nw.conf" "$work/daemon.log"
	settled() {
		nw_all_final && [[ $(pg_psql "SELECT count(*) FROM bisections WHERE state <> 'done'") == 0 &&
			$(pg_psql "SELECT count(*) FROM regressions WHERE state IN ('open', 'bisecting')") == 0 ]]
	}
	nw_wait 3600 "every regression settled" settled
	sleep 12 # two mail sweeps
	# The planted bugs: the culprits of the demo history (kernels/demolib-history). On the host
	# build the attention forward's missing barrier is no race (one thread runs a block).
	local planted="title LIKE 'softmax: vectorised%' OR title LIKE 'attention: bf16 backward loads%'
		OR title LIKE 'msda: skip points of negligible%' OR title LIKE 'attention: one barrier%'"
	pg_psql "SELECT
		(SELECT count(*) FROM bisections b JOIN commits c ON c.id = b.culprit_id
		 WHERE b.outcome = 'culprit' AND NOT ($planted)),
		(SELECT count(DISTINCT culprit_id) FROM bisections WHERE outcome = 'culprit'),
		(SELECT count(*) FROM mail WHERE kind = 'culprit' AND state = 'sent'),
		(SELECT count(*) FROM stats s JOIN commits c ON c.id = s.commit_id WHERE s.regression_new AND NOT ($planted)),
		(SELECT count(*) FROM commits c WHERE ($planted) AND c.title NOT LIKE 'attention: one barrier%'
		 AND NOT EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = c.id AND s.regression_new))" | tr '|' ' '
	pg_psql "SELECT string_agg(c.position || ' ' || left(c.title, 40) || ': ' || commit_verdict(c.id)
		|| coalesce(' (' || (SELECT string_agg(k.name || '/' || s.dtype, ' ') FROM stats s JOIN checks k
		ON k.id = s.check_id WHERE s.commit_id = c.id AND s.regression_new) || ')', ''), E'\n' ORDER BY c.position)
		FROM commits c" >&2
	pg_psql "SELECT string_agg(b.id || ' ' || k.name || '/' || b.dtype || ' ' || b.outcome || ' '
		|| coalesce(left(c.title, 40), '-'), E'\n') FROM bisections b JOIN checks k ON k.id = b.check_id
		LEFT JOIN commits c ON c.id = b.culprit_id" >&2
	pg_psql "SELECT string_agg('regression ' || r.id || ' ' || k.name || '/' || r.dtype || ' ' || r.state
		|| ' new at ' || n.position || coalesce(' fixed at ' || f.position, ''), E'\n' ORDER BY r.id)
		FROM regressions r JOIN checks k ON k.id = r.check_id JOIN commits n ON n.id = regression_start(r)
		LEFT JOIN commits f ON f.id = r.fixed_commit_id" >&2
	pg_psql "SELECT string_agg(c.position || ' ' || k.name || '/' || s.dtype || ' ' || s.verdict || ' ('
		|| s.failures || '/' || s.trials || ') ' || coalesce(s.evidence->>'reason', ''), E'\n'
		ORDER BY c.position, k.name, s.dtype) FROM stats s JOIN commits c ON c.id = s.commit_id
		JOIN checks k ON k.id = s.check_id WHERE s.verdict NOT IN ('clean') AND c.position > 10" >&2
)

printf '%-10s %4s  %12s %15s %13s %16s %7s\n' history run wrong_blames culprit_commits culprit_mails \
	new_elsewhere missed
tw=0 tc=0 tm=0 ts=0 tmiss=0
for name in ${HISTORIES:-race seedbound demo}; do
	n=$runs
	[[ $name != demo ]] || n=1
	for ((r = 1; r <= n; r++)); do
		if [[ $name == demo ]]; then
			line=$(demo_run 2>"/tmp/planted-$name-$r.log") || line="error"
		else
			line=$(one_run "$name" 2>"/tmp/planted-$name-$r.log") || line="error"
		fi
		if [[ $line == error ]]; then
			echo "$name run $r failed: /tmp/planted-$name-$r.log" >&2
			continue
		fi
		read -r w c m s miss <<<"$line"
		printf '%-10s %4d  %12d %15d %13d %16d %7d\n' "$name" "$r" "$w" "$c" "$m" "$s" "$miss"
		tw=$((tw + w)) tc=$((tc + c)) tm=$((tm + m)) ts=$((ts + s)) tmiss=$((tmiss + miss))
	done
done
printf '%-10s %4s  %12d %15d %13d %16d %7d\n' total "" "$tw" "$tc" "$tm" "$ts" "$tmiss"
