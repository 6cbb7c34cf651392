#!/usr/bin/env bash
# Makes the git history of the example CUDA C++ library axpy (examples/axpy, its own CMake build):
#
#   make-axpy-history.sh DIR
#
#   1  axpy: out = a x + b y, on the host and with CUDA     clean
#   2  docs: a README                                       clean (the library untouched)
#   3  axpy: drop the scalar tail loop                      BUG: when n % 4 != 0 the last n % 4
#                                                           elements are never written
#
# Authors and dates are fixed: the same script makes the same commits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: make-axpy-history.sh DIR}
[[ ! -e $dir ]] || {
	echo "make-axpy-history: '$dir' exists" >&2
	exit 2
}
git init -q -b main "$dir"
cp -R "$here/axpy/." "$dir/"
n=0
commit() { # AUTHOR EMAIL TITLE
	n=$((n + 1))
	git -C "$dir" add -A
	GIT_AUTHOR_DATE="2026-04-0${n}T12:00:00Z" GIT_COMMITTER_DATE="2026-04-0${n}T12:00:00Z" \
		git -C "$dir" -c user.name="$1" -c user.email="$2" commit -qm "$3"
}
commit "Ada Lane" ada@example.com "axpy: out = a x + b y, on the host and with CUDA"
printf '# axpy\n\nout = a x + b y, on the host and on CUDA devices. Build: cmake -S . -B build && cmake --build build\n' >"$dir/README.md"
commit "Ada Lane" ada@example.com "docs: a README"
python3 - "$dir/src/axpy_host.cpp" "$dir/src/axpy.cu" <<'PY'
import sys
host, cu = sys.argv[1:]
s = open(host).read()
old = "\tfor (; i < n; i++)\n\t\tout[i] = a * x[i] + b * y[i];\n"
assert s.count(old) == 1
open(host, "w").write(s.replace(old, ""))
s = open(cu).read()
old = "\t} else {\n\t\tfor (; i < n; i++)\n\t\t\tout[i] = a * x[i] + b * y[i];\n\t}\n"
assert s.count(old) == 1
open(cu, "w").write(s.replace(old, "\t}\n"))
PY
commit "Bo Vance" bo@example.com "axpy: drop the scalar tail loop"
