#!/usr/bin/env bash
# A range whose first signal was a flake ends with nobody blamed: one commit's
# non-deterministic check fails twice on one seed (and never again), the
# daemon flags it and queues a bisection by itself, and the bisection, with
# fresh seeds, blames nobody (and no culprit mail is queued).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-flake.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
git init -q -b main "$repo"
echo good >"$repo/mode"
for i in 0 1 2 3 4 5 6 7; do
	bwd=good
	((i == 5)) && bwd=flake-signal
	echo "$bwd" >"$repo/bwd_mode"
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
pg_start
NW_PORT=$(nw_free_port)
nw_mode_conf "$work/nw.conf" flake "$repo" 16 400
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
flagged() { [[ $(pg_psql "SELECT count(*) FROM bisections") -ge 1 ]]; }
nw_wait 90 "the flake's signal queues a bisection" flagged
[[ $(pg_psql "SELECT c.title FROM bisections b JOIN commits c ON c.id = b.bad_commit_id LIMIT 1") == "change 5" ]] ||
	fail "the bisection is not about the flaky commit"
finished() { [[ $(pg_psql "SELECT count(*) FROM bisections WHERE state <> 'done'") == 0 ]]; }
nw_wait 600 "the bisection finishes" finished
outcome=$(pg_psql "SELECT string_agg(outcome, ',') FROM bisections")
blamed=$(pg_psql "SELECT count(*) FROM bisections WHERE outcome = 'culprit'")
[[ $blamed == 0 ]] || fail "a flake was blamed on a commit (outcomes: $outcome)"
[[ $outcome =~ ^no_culprit(,no_culprit)*$ ]] || fail "expected no culprit, got: $outcome"
[[ $(pg_psql "SELECT count(*) FROM mail WHERE kind = 'culprit'") == 0 ]] || fail "a culprit mail was queued for a flake"
echo "ok: the flake's bisection ended '$outcome' with nobody blamed ($(pg_psql "SELECT coalesce(sum(trials), 0) FROM probes") probe trials)"
