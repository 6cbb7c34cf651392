#!/usr/bin/env bash
# bench/bisect-sim.sh [BUILD_DIR] [RUNS]: flake-aware bisection (daemon/bisect.c)
# against `git bisect` with repeated probes and against the information bound,
# by the deterministic simulator bench/bisect-sim, for both culprit models (a
# race, and a culprit deterministic per seed whose failing seeds are
# replayed). Builds nothing: it runs the binary from BUILD_DIR (default:
# build/). Appends a dated section to docs/benchmarks.md: move it in place of
# the previous one by hand, keeping the hand-written notes that follow it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
runs=${2:-500}
bin=$build/bench/bisect-sim
if [ ! -x "$bin" ]; then
	echo "bisect-sim.sh: no '$bin': build the bisect-sim target first" >&2
	exit 1
fi
jobs=$(nproc)
start=$(date +%s)
breakdown=$(mktemp)
trap 'rm -f "$breakdown"' EXIT
tables=$("$bin" -r "$runs" -j "$jobs" -v 2>"$breakdown")
secs=$(($(date +%s) - start))
echo "$tables"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
{
	echo
	echo "### Bisection: $(date -u +%Y-%m-%d), $(nproc) cores ($cpu)"
	echo
	echo "Command: \`bench/bisect-sim.sh $build $runs\` (\`bisect-sim -r $runs -j $jobs\`, ${secs} s)."
	echo "Deterministic: the same seed (and the same libm) gives the same table."
	echo
	cat <<'EOF'
Setup. A history of n commits in first-parent order; 5% of commits do not build
and 5% have the same binary as their parent (never the bad commit); the culprit
is drawn uniformly among the others. Two culprit models, each over the same
grid. The bisection starts as the daemon's does, from the bad commit's
verdict: the daemon's own statistics (`stats_verdict`, the default
`[verdict]` settings) judge a first pass of 64 fresh seeds paired with the
good commit's (the pooled baseline: the good side's last eight first passes
at f), with every failing seed rerun and more trials where the evidence is
ambiguous (up to `[trials] max`, 1024), and the bad commit's trials are drawn
again until the verdict says `regressed`. All those trials are given to the
model, as the daemon gives it the verdict's; they are not counted below. The
race is judged as a non-deterministic check, the seeded culprit as a
deterministic one. Ranges without a culprit start from a flake (a first pass
of 64 with at least one failure; none at f = 0: started by hand), since the
verdicts hardly ever flag a flake of that rate.

- *race*: every trial at or after the culprit fails independently with rate q,
  every other trial with the baseline flake rate f. The hardest case: a seed
  that failed once is no likelier to fail again. The daemon replays the
  bad commit's failing seeds that did not pass their rerun (daemon/bisector.c):
  a race's failing seed is kept when its rerun failed too (probability q),
  and those kept fail again at q, as any seed does. None is replayed when the reruns show a
  race at odds of 99 (bisect_judge_seeds: they failed again at about the
  first pass's rate), as in the daemon.
- *seeded*: a fixed share q of seeds fail, deterministically, at every commit
  from the culprit on and never before (a softmax tail bug fails exactly the
  seeds whose shape has C > 1024 and C % 4 != 0); every other trial fails at
  f. The seeds that failed at the bad commit (about 64 q of them, plus any
  flakes) are the bisection's failing seeds (`bisect_params.failing_seeds`;
  a flake's seed only if its rerun failed too, probability f). When the reruns show the failures seed-bound
  at odds of 99 (bisect_judge_seeds), the kept seeds' failed reruns are
  recorded as their replay at the bad commit, as the daemon does; else
  bisect_next_probes replays them there first. It replays them first at
  each commit, two per probe (one once E[q_s] is
  at least 0.99) and each once per commit, and the simulator runs them in order
  from the first not yet run there; `bisect_observe` records those trials
  as failing-seed trials, which the model fits with their own rate q_s. Replayed at a commit at or after the
  culprit, a failing seed that is one of the culprit's fails for sure; one
  that failed by a flake fails at f, as everything does before the culprit.
  Fresh seeds fail at q + (1 - q) f at or after the culprit. Confirmation
  uses fresh seeds in both models.

The model is told f (floored at 0.001: the daemon cannot know that it is
exactly 0) but not q, which it learns from the bad commit's verdict trials
and the probes. Fresh-seed probes stop at their first failure (failing-seed
probes run both their seeds); a lone probe also stops at
the passes that would end the search. *wall* is the longest probe
of each round, summed: the search's duration in trial-times. A culprit is
blamed only after bisect_confirm re-tested it and its parent with fresh seeds;
a withdrawn culprit's trials go back into the posterior and the search goes
on (at most three culprits are put to the test).

The bound. One trial at commit j fails with rate q if the culprit is at or
before j, else with f. If the culprit lies at or before j with probability
pi, the trial's outcome Y tells I(pi) = h(pi q + (1 - pi) f) - pi h(q) -
(1 - pi) h(f) bits about the culprit, h the binary entropy; every culprit on
one side of j looks alike to it, so that is all it can tell. The largest
value over pi is the capacity C(q, f) of that binary channel (C = 1 bit for
q = 1, f = 0 at pi = 1/2; 0.0270 bits for q = 0.05, f = 0 at pi = 0.37;
0.0162 for q = 0.05, f = 0.005; 0.0036 for q = 0.02, f = 0.005). By the chain
rule, the mutual information between the culprit and a record of T trials is
the sum of what each trial adds given the ones before, each at most C,
however the probes are chosen (adaptively, k at a time): feedback does not
raise the capacity of a memoryless channel. Naming one of N equally likely
eligible commits takes log2 N bits, so E[trials] >= log2 N / C(q, f).
(Fano's inequality lowers the bits needed at 1% error by about 2%; the
bound also assumes q known and ignores the end of the search, where 99%
certainty costs about ln(99) / D(f || q) clean trials at the culprit's
parent alone: 90 at q = 0.05, f = 0. So no search reaches it; the ablation
rows show how much of the gap is the price of learning q.)

The bound, seeded. A replayed failing seed that is one of the culprit's is a
q = 1 channel: it fails at j for sure if the culprit is at or before j, else
at f. No trial does better (a fresh seed is the C(q, f) channel above, and a
failing seed that may have been a flake is a mixture of the two): the outcome
of any trial given the culprit is a Bernoulli whose rate lies in [f, 1], and
the capacity over that set is C(1, f), at its end points. So E[trials] >=
log2 N / C(1, f): log2 N at f = 0 (C = 1 bit), log2 N / 0.977 at f = 0.005.

git bisect. `git bisect run` with r trials per probe, a probe bad if any of
them fails (stopping there), unbuildable commits skipped (git bisect skip:
the nearest buildable one), the bad commit taken as bad. r is the smallest
value reaching our accuracy on the same histories, or, marked r*, the most
accurate r when none does: with f > 0 a larger r also makes clean commits
look bad, so its accuracy peaks and falls. git bisect has no confirmation
step and runs one probe at a time. In the seeded model two users: one who
re-runs the test with r fresh seeds per probe (as above), and one who passes
the report's first failing seed to `git bisect run` (r = 1, that seed). The
latter is an exact binary search when f = 0; with f > 0 it goes astray when
that seed failed by a flake at the bad commit (it then passes everywhere and
git names the bad commit) or flakes once at a clean commit, and it has
nothing to tell it so.
EOF
	echo
	echo "$tables"
	echo
	echo "#### Where the search's trials go"
	echo
	echo "\`bisect-sim -v\`, 128 commits, one slot: the search's trials per bisection (probes in"
	echo "brackets) by where they ran against the true culprit (the parent: the nearest"
	echo "eligible commit before it), the trials until the true culprit first held 0.5"
	echo "and 0.9, E[q | culprit] after the bad commit's verdict trials (*bad commit's"
	echo "trials*) and at the end, and the confirmation's trials at the culprit and at"
	echo "its parent. Race:"
	echo
	# The -v tables on stderr: the race one, then the seeded one after its title line.
	awk '/^seeded:/ { exit } /^\| (commits|---)/ && n < 2 { print; n++; next }
	     /^\| 128 \| [0-9.]+ \| [0-9.]+ \| 1 \|/' "$breakdown"
	echo
	echo "Seeded, with the failing seeds the bad commit gave, the search's trials that"
	echo "replayed one, and E[q_s | culprit], the failing seeds' rate, at the end:"
	echo
	awk '/^seeded:/ { on = 1; next } on && /^\| (commits|---)/ { print; next }
	     on && /^\| 128 \| [0-9.]+ \| [0-9.]+ \| 1 \|/' "$breakdown"
} >>"$root/docs/benchmarks.md"
