#!/usr/bin/env bash
# Several daemons, one database (issue 16): jobs say what they need. Daemon
# 'gpu' has one GPU slot, daemon 'cpu' two host slots. The runners' CUDA
# build declares a check its host build does not (fake.gpu: CUDA-only). The
# commits' first builds go to the host with a GPU slot (only it asks the CUDA
# runner); fake.gpu and the compute-sanitizer runs (a stand-in that runs the
# runner as the tool would) go only to the GPU slot; the host slots run their
# share of the rest, with runners they built themselves, identical to the
# first builds'.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-needs.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
git init -q -b main "$repo"
echo fake.gpu >"$repo/cuda_checks"
echo 0.05 >"$repo/delay" # long enough for the second daemon to take a share
for ((i = 0; i < 8; i++)); do
	echo good >"$repo/mode"
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
# compute-sanitizer's stand-in: runs the runner (its last argument), which reports nothing.
printf '#!/bin/sh\nfor a; do r=$a; done\nexec "$r"\n' >"$work/sanitizer"
chmod +x "$work/sanitizer"
pg_start
for d in gpu cpu; do
	mkdir -p "$work/$d"
	NW_PORT=$(nw_free_port) nw_mode_conf "$work/$d/nw.conf" needs "$repo" 16 256 \
		"[daemon]\nnode_name = $d\n[sanitizer]\ntools = memcheck\nevery = 4\npath = $work/sanitizer"
done
sed -i 's/^slots = host, host$/slots = 0\ngpus = 1/' "$work/gpu/nw.conf"
# The GPU host first, so that the other sees it alive before it could take a first build.
nw_fleet_start "$work" gpu
up() { [[ $(pg_psql "SELECT count(*) FROM daemons WHERE name = 'gpu' AND gpu_slots = 1") == 1 ]]; }
nw_wait 60 "the GPU host's heartbeat" up
nw_fleet_start "$work" cpu
nw_wait 600 "every commit judged" nw_settled

needs=$(pg_psql "SELECT string_agg(name || '=' || coalesce(needs, 'any'), ' ' ORDER BY name) FROM checks")
[[ $needs == "fake.fwd=any fake.gpu=gpu" ]] || fail "what the checks need: '$needs'"
first=$(pg_psql "SELECT string_agg(DISTINCT host, ' ') FROM builds")
[[ $first == gpu ]] || fail "the first builds were made by '$first', not by the GPU host alone"
by=$(pg_psql "SELECT string_agg(x, ' ' ORDER BY x) FROM (SELECT k.name || CASE WHEN t.sanitizer IS NULL THEN ''
	ELSE '+' || t.sanitizer END || '@' || t.host AS x FROM trials t JOIN checks k ON k.id = t.check_id
	GROUP BY 1) y")
[[ $by == "fake.fwd+memcheck@gpu fake.fwd@cpu fake.fwd@gpu fake.gpu+memcheck@gpu fake.gpu@gpu" ||
	$by == "fake.fwd+memcheck@gpu fake.fwd@cpu fake.gpu+memcheck@gpu fake.gpu@gpu" ]] ||
	fail "who ran what: '$by': fake.gpu and the sanitizer runs must be the GPU host's, fake.fwd partly the host slots'"
local_ok=$(pg_psql "SELECT count(*) FILTER (WHERE host_ok) || ' ' || count(*) FROM host_builds WHERE host = 'cpu'")
read -r ok all <<<"$local_ok"
((all > 0 && ok == all)) || fail "the host-only daemon's own builds: $ok of $all identical to the first builds'"
infra=$(pg_psql "SELECT count(*) FROM trials WHERE outcome = 'infra_error'")
[[ $infra == 0 ]] || fail "$infra infra_error trials"
why=$(nw_no_duplicates) || fail "$why"
echo "ok: checks need $needs; first builds by $first; ran: $by; the host-only daemon built $all commits itself"
