#!/usr/bin/env bash
# Several daemons, one database (issue 16): a host dies. Two daemons share a
# history ([daemon] lease = 10 s); one is killed with SIGKILL while it runs
# trials; then (restarted, a bug pushed) the one running the bug's
# bisection's confirmation probe is killed too. Each time the other takes the dead one's jobs over within
# the lease plus 10 s (measured from the database's timestamps: the kill, and
# jobs.taken_over_at), and finishes: every stored trial is still there, every
# planned seed has its result, none ran twice, the bug is bisected to its
# commit and mailed once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-kill.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
lease=10 per_commit=32 bug=14 n=24
git init -q -b main "$repo"
# Trials take a little time (the run can be interrupted mid-way), and a
# bisection's fresh seeds (its confirmation) wait for $work/open: a probe is
# certainly running when the test kills its daemon. The commits from the bug
# on are pushed after the first kill.
echo 0.05 >"$repo/delay"
echo "fake.fwd $work/open $per_commit" >"$repo/gate"
commits() {
	for ((i = $1; i < $2; i++)); do
		if ((i >= bug)); then echo failing; else echo good; fi >"$repo/mode"
		echo "$i" >"$repo/version"
		nw_commit "$repo" "$i"
	done
}
commits 0 $bug
pg_start
for d in a b; do
	mkdir -p "$work/$d"
	NW_PORT=$(nw_free_port) nw_mode_conf "$work/$d/nw.conf" kill "$repo" $per_commit 256 \
		"[daemon]\nnode_name = $d\nlease = $lease\n[mail]\nfrom = numwatch <numwatch@example.org>
to = dev@example.org\nsend_to_author = false\nmbox = $work/mbox"
done
nw_fleet_start "$work" a b

# kill_and_measure NAME WHAT: SIGKILLs NAME, waits until the other daemon has
# taken over every job NAME held, and checks it did so within lease + 10 s.
kill_and_measure() {
	local what=$2 before count_before max_before taken slowest
	victim=$1
	nw_fleet_kill "$victim"
	killed_at=$(pg_psql "SELECT now()")
	held=$(pg_psql "SELECT count(*) FROM jobs WHERE owner = '$victim' AND state = 'running'")
	before=$(pg_psql "SELECT count(*) || ' ' || coalesce(max(id), 0) FROM trials")
	read -r count_before max_before <<<"$before"
	((held > 0)) || fail "$victim held no job when it was killed $what"
	[[ $what != *bisection* ]] || touch "$work/open"
	# (nw_wait has locals of its own: what this reads is in globals.)
	taken_over() {
		[[ $(pg_psql "SELECT count(*) FROM jobs WHERE owner = '$victim' AND state = 'running'") == 0 &&
			$(pg_psql "SELECT count(*) FROM jobs WHERE taken_from = '$victim'
				AND taken_over_at > '$killed_at'") -ge $held ]]
	}
	local end=$((SECONDS + lease * 6))
	until taken_over; do
		((SECONDS < end)) || fail "the jobs $victim held were not taken over within $((lease * 6)) s (killed at $killed_at,
$held held): $(pg_psql "SELECT string_agg(id || ' ' || kind || ' ' || state || ' owner ' || coalesce(owner, '-')
			|| ' from ' || coalesce(taken_from, '-') || ' at ' || coalesce(taken_over_at::text, '-'), E'\n')
			FROM jobs WHERE owner = '$victim' OR taken_from = '$victim'")"
		sleep 0.5
	done
	taken=$(pg_psql "SELECT string_agg(kind || ' ' || id || ' after ' ||
		round(extract(epoch FROM taken_over_at - '$killed_at'::timestamptz)::numeric, 1) || ' s', ', ')
		FROM jobs WHERE taken_from = '$victim' AND taken_over_at > '$killed_at'")
	slowest=$(pg_psql "SELECT max(extract(epoch FROM taken_over_at - '$killed_at'::timestamptz))
		FROM jobs WHERE taken_from = '$victim' AND taken_over_at > '$killed_at'")
	python3 -c "import sys; sys.exit(0 if float('$slowest') <= $lease + 10 else 1)" ||
		fail "taking over $victim's jobs took ${slowest}s, more than the lease ($lease s) plus 10 s: $taken"
	[[ $(pg_psql "SELECT count(*) FROM trials WHERE id <= $max_before") == "$count_before" ]] ||
		fail "trials stored before $victim was killed are missing"
	echo "ok: $victim killed $what holding $held jobs; taken over: $taken"
}

# During the trials.
killable() {
	[[ $(pg_psql "SELECT count(*) >= 100 FROM trials") == t &&
		$(pg_psql "SELECT count(*) > 0 FROM jobs WHERE owner = 'a' AND state = 'running' AND kind = 'trials'") == t ]]
}
nw_wait 300 "a to run trials" killable
kill_and_measure a "during the trials"

# During a bisection: a restarted, the bug pushed, the owner of a confirmation probe (waiting for
# $work/open) killed.
nw_fleet_start "$work" a
commits $bug $n
probing() {
	probe_owner=$(pg_psql "SELECT owner FROM jobs WHERE kind = 'probe' AND bisection_id IS NOT NULL
		AND state = 'running' AND seeds[1] >= $per_commit ORDER BY id LIMIT 1")
	[[ -n $probe_owner ]]
}
nw_wait 300 "a confirmation probe to run" probing
probing
kill_and_measure "$probe_owner" "during a bisection"

nw_wait 600 "the other daemon to finish" nw_settled
why=$(nw_no_duplicates) || fail "$why"
incomplete=$(pg_psql "SELECT count(*) FROM stats s WHERE verdict <> 'build_failed'
	AND (SELECT count(DISTINCT seed) FROM trials t WHERE t.commit_id = s.commit_id AND t.check_id = s.check_id
	     AND t.dtype = s.dtype AND t.outcome <> 'infra_error' AND t.seed < $per_commit) <> $per_commit")
[[ $incomplete == 0 ]] || fail "$incomplete check x dtype runs lack some of their $per_commit seeds (trials lost)"
infra=$(pg_psql "SELECT count(*) FROM trials WHERE outcome = 'infra_error'")
[[ $infra == 0 ]] || fail "$infra infra_error trials"
got=$(nw_outcome | grep -E '^(regression|bisection|mail)')
[[ $got == "regression fake.fwd f32 new@$bug culprit fixed@- culprit@$bug
bisection fake.fwd f32 done culprit culprit@$bug
mail culprit culprit@$bug sent "* ]] || fail "the bug at $bug is not bisected and mailed once: $got"
echo "ok: the other daemon finished: $(pg_psql "SELECT count(*) FROM trials") trials, none lost, none run twice;" \
	"the bug bisected to $bug and mailed once"
