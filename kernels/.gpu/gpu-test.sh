#!/bin/bash
# Temporary: exercise the CUDA runners on a real GPU (not part of the tree).
set -u
cd "$(dirname "$0")"
nvidia-smi -L
N=${N:-2000}
R=$OUT/r; mkdir -p $R
./runner-cuda-s6 --list; echo
for v in s6 s4; do
	n=$N; [ $v = s4 ] && n=500
	for c in softmax.fwd softmax.bwd; do for d in f32 f16 bf16; do
		( ./runner-cuda-$v --check $c --dtype $d --seed 0 --count $n > $R/$v.$c.$d.jsonl 2>$R/$v.$c.$d.err; echo "$v $c $d rc=$?" ) &
	done; done
	wait
done
./runner-cuda-s6 --list | head -c 300; echo
cd $R && python3 - <<'PY'
import json, glob
for f in sorted(glob.glob('*.jsonl')):
    rs = [json.loads(l) for l in open(f)]
    fails = [a for a in rs if a['verdict'] != 'pass']
    bug = lambda a: a['case']['shape'][0] > 0 and a['case']['shape'][1] > 1024 and a['case']['shape'][1] % 4
    wrong = [a['seed'] for a in fails if not bug(a)]
    missed = [a['seed'] for a in rs if bug(a) and a['verdict'] == 'pass']
    errors = [a for a in rs if a['verdict'] == 'error']
    top = max(rs, key=lambda a: a.get('ratio') or 0)
    print(f, 'n', len(rs), 'fail', len(fails), 'err', len(errors), 'fail-outside-bug-shapes', wrong[:5], 'bug-shapes-missed', missed[:5],
          'max ratio %.3f seed %d %s' % (top['ratio'], top['seed'], top['case']) if not f.startswith('s4') else '',
          'median kernel_us %.1f' % sorted(a.get('kernel_us') or 0 for a in rs)[len(rs) // 2])
PY
tar czf $OUT/results.tgz *.jsonl
