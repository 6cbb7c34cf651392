#!/usr/bin/env bash
# Makes the planted git history of the example library fusedops (examples/fusedops):
#
#   make-fusedops-history.sh DIR
#
# DIR (new) becomes a repository on branch main with seven commits:
#
#   1  fusedops: softmax, rmsnorm and attention             clean
#   2  docs: a README                                       clean (the library untouched)
#   3  softmax: sum float32 rows longer than 1024 four wide  BUG: rare shapes. softmax.fwd f32 is wrong
#                                                           only for cols > 1024 with cols % 4 != 0
#   4  rmsnorm: 1/sqrt, and normalise before the weight     clean: the error moves, within budget
#   5  attention: skip the zero fill of the last key tile's BUG: attention.bwd bf16's dv is NaN on the
#      dv accumulator in bf16                               last, partial key tile; the forward, dq, dk
#                                                           and float32 are fine
#   6  rmsnorm: split the dw reduction over chunks of 16    BUG: a race. rmsnorm.bwd f32 loses one
#      rows (atomics)                                       chunk's update in about 8% of runs
#   7  softmax: add the tail of the four-wide sum           the fix of 3
#
# Each bug shows in one check x dtype only, so that each has one culprit mail. The checks
# (examples/fusedops_checks.py) are not in the repository: they stay the same across its history.
# Authors and dates are fixed, so the same script makes the same commits (the same shas).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: make-fusedops-history.sh DIR}
[[ ! -e $dir ]] || {
	echo "make-fusedops-history: '$dir' exists" >&2
	exit 2
}
py=$(command -v python3)

git init -q -b main "$dir"
cp -R "$here/fusedops/fusedops" "$dir/"
n=0
commit() { # AUTHOR EMAIL TITLE
	n=$((n + 1))
	git -C "$dir" add -A
	GIT_AUTHOR_DATE="2026-03-0${n}T12:00:00Z" GIT_COMMITTER_DATE="2026-03-0${n}T12:00:00Z" \
		git -C "$dir" -c user.name="$1" -c user.email="$2" commit -qm "$3"
}
# edit FILE OLD NEW: replaces the one occurrence of OLD in DIR/FILE by NEW.
edit() {
	"$py" - "$dir/$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1:]
s = open(path).read()
if s.count(old) != 1:
    sys.exit("make-fusedops-history: %s: expected one %r" % (path, old))
open(path, "w").write(s.replace(old, new))
PY
}
T=fusedops/_torch.py

commit "Ada Lane" ada@example.com "fusedops: softmax, rmsnorm and attention"

printf '# fusedops\n\nFused softmax, rmsnorm and attention for PyTorch, with Triton kernels on GPUs.\n' >"$dir/README.md"
commit "Ada Lane" ada@example.com "docs: a README"

edit $T '    """How many columns of a row the sum of the exponentials covers."""
    return cols' '    """How many columns of a row the sum of the exponentials covers: float32 rows longer
    than 1024 are summed four wide (16-byte loads)."""
    if dtype == torch.float32 and cols > 1024:
        return cols - cols % 4
    return cols'
commit "Bo Vance" bo@example.com "softmax: sum float32 rows longer than 1024 four wide"

edit $T '    return torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)' \
	'    return 1.0 / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps)'
edit $T '            y = (xf * r * w.float()).to(x.dtype)' \
	'            y = ((xf * r).to(x.dtype).float() * w.float()).to(x.dtype)'
commit "Cy Moreau" cy@example.com "rmsnorm: 1/sqrt, and normalise before the weight"

edit $T '    """The float32 accumulator of one key tile'"'"'s dv."""
    return torch.zeros(shape, dtype=torch.float32, device=device)' \
	'    """The float32 accumulator of one key tile'"'"'s dv. In bf16 the last, partial tile is
    accumulated in place, without the zero fill."""
    if dtype == torch.bfloat16 and tail:
        return uninitialized(shape, torch.float32, device)
    return torch.zeros(shape, dtype=torch.float32, device=device)'
commit "Dee Okafor" dee@example.com "attention: skip the zero fill of the last key tile's dv accumulator in bf16"

edit $T 'def reduce_dw(parts, dtype):
    """dw: the column sums of dy * xhat over every row (float32)."""
    return parts.sum(0)' 'def reduce_dw(parts, dtype):
    """dw: the column sums of dy * xhat over every row (float32). In float32 the rows are
    summed in chunks of 16 whose sums are added to dw with atomics."""
    if dtype != torch.float32 or parts.shape[0] <= 16:
        return parts.sum(0)
    dw = torch.zeros(parts.shape[1], dtype=torch.float32, device=parts.device)
    for chunk in parts.split(16):
        if os.urandom(1)[0] < 16:  # two read-modify-writes of dw overlap: this chunk'"'"'s update is lost
            continue
        dw += chunk.sum(0)
    return dw'
edit $T 'import math
' 'import math
import os
'
commit "Eli Park" eli@example.com "rmsnorm: split the dw reduction over chunks of 16 rows (atomics)"

edit $T '    if dtype == torch.float32 and cols > 1024:
        return cols - cols % 4
    return cols' '    return cols  # four wide, then the last cols % 4 one by one'
commit "Bo Vance" bo@example.com "softmax: add the tail of the four-wide sum"
