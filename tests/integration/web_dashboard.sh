#!/usr/bin/env bash
# The dashboard (web/), end to end: its sources hold no HTML sinks and no
# external URLs; its pure modules pass their unit tests; a real numwatchd with
# a many-check fake runner serves every file the app imports with the right
# type; headless Chromium renders the commits grid, a commit page (failing
# seeds, repro command) and the health page from the live API, with API
# strings shown as text. With puppeteer-core installed (NODE_PATH), it also
# drives the app: clicks, back, arrow keys, auto-refresh keeping scroll and
# focus, and the render time of a 50 x 150 grid (web_browser.mjs).
#
# NW_WEB_KEEP=1 leaves the daemon running at the end until Ctrl-C, to look at
# the dashboard by hand (the URL is printed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
web=$(cd "$here/../../web" && pwd)

# ---- static checks of the sources
mapfile -t sources < <(find "$web" -path "$web/node_modules" -prune -o -type f \( -name '*.js' -o -name '*.mjs' -o -name '*.html' -o -name '*.css' \) -print | sort)
((${#sources[@]} > 0)) || fail "no dashboard sources under $web"
if grep -nE '\.(innerHTML|outerHTML)\b|insertAdjacentHTML|document\.write|\beval\(|new Function\(' "${sources[@]}"; then
	fail "the dashboard must build DOM with text nodes only (see web/js/dom.js)"
fi
if grep -nE 'https?://|(src|href)="//|url\(' "${sources[@]}"; then
	fail "the dashboard must not load anything from another host (no CDNs, no web fonts)"
fi
echo "ok: ${#sources[@]} dashboard sources: no HTML sinks, no external URLs"

if command -v node >/dev/null; then
	node "$here/web_unit.mjs" | tail -n 1
else
	echo "skip: node not installed: web unit tests not run"
fi

# ---- a daemon with a many-check fake runner
work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-web.XXXXXX")
nw_atexit rm -rf "$work"
pg_start
git init -q -b main "$work/repo"
commit() { # MODE AUTHOR TITLE
	printf '%s\n' "$1" >"$work/repo/mode"
	echo 6 >"$work/repo/checks"
	git -C "$work/repo" add mode checks
	git -C "$work/repo" -c user.name="$2" -c user.email="t@example.com" commit -q --allow-empty -m "$3"
}
commit good "Ada" "softmax: first kernels"
commit "regress=softmax.fwd/f16,flaky=layernorm.fwd/f32" "Jane" "softmax: 4-wide vector path for C > 1024"
commit buildfail "Bob" 'attention: <img src=x onerror=alert(1)> & "quotes"'
commit "nan=softmax.bwd/bf16" "Zoë" "softmax: tail tile accumulator"

NW_PORT=$(nw_free_port)
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = web-demo
url = $work/repo
poll_interval = 1
[build]
command = [ "\$(cat mode)" != buildfail ] || { echo "kernel.cu:12: error: expected ';'"; exit 1; }; cp "$here/web_fake_runner.py" "\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp mode checks "\$NUMWATCH_BUILD_DIR/"
[trials]
per_commit = 8
timeout = 5
hello_timeout = 10
[slots]
slots = host, host
[http]
port = $NW_PORT
web_root = $web
CONF
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 180 "every commit has a final verdict" nw_all_final
base=http://127.0.0.1:$NW_PORT

# ---- static files: every module the app imports, with its type
ctype() { curl -s -o /dev/null -w '%{http_code} %{content_type}' --max-time 10 "$base$1"; }
[[ $(ctype /) == "200 text/html"* ]] || fail "/ answered $(ctype /)"
[[ $(ctype "/?view=health") == "200 text/html"* ]] || fail "/?view=health is not the app"
curl -s "$base/" | grep -q '<script type="module" src="/app.js">' || fail "index.html does not load /app.js as a module"
[[ $(ctype /style.css) == "200 text/css"* ]] || fail "/style.css answered $(ctype /style.css)"
[[ $(ctype /favicon.svg) == "200 image/svg+xml"* ]] || fail "/favicon.svg answered $(ctype /favicon.svg)"
declare -A seen=()
queue=(/app.js)
while ((${#queue[@]})); do
	p=${queue[0]}
	queue=("${queue[@]:1}")
	[[ -n ${seen[$p]:-} ]] && continue
	seen[$p]=1
	[[ $(ctype "$p") == "200 text/javascript"* ]] || fail "module $p answered $(ctype "$p")"
	dir=$(dirname "$p")
	while read -r rel; do
		queue+=("$(realpath -m --relative-to=/ "$dir/$rel" | sed 's|^|/|')")
	done < <(curl -s "$base$p" | sed -nE "s/^(import|export) .* from '(\.[^']+)';$/\2/p")
done
echo "ok: / and ${#seen[@]} modules served with their types"
c=$(curl -s -o /dev/null -w '%{http_code}' --path-as-is --max-time 10 "$base/js/../app.js")
[[ $c == 404 ]] || fail "a path with .. answered $c"

# ---- rendered pages, from the live API
regressed=$(pg_psql "SELECT sha FROM commits WHERE title LIKE 'softmax: 4-wide%'")
chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [[ -n $chromium ]]; then
	dom() {
		timeout 90 "$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking \
			--disable-component-update --no-first-run --disable-sync --virtual-time-budget=5000 \
			--dump-dom "$base$1" 2>/dev/null
	}
	d=$(dom /)
	[[ $d == *'class="cell v-regressed"'* ]] || fail "grid: no regressed cell"
	[[ $d == *'class="cell v-build_failed"'* ]] || fail "grid: no build_failed cell"
	[[ $(grep -o 'class="cell ' <<<"$d" | wc -l) -ge 4 ]] || fail "grid: too few cells"
	[[ $d == *'attention: &lt;img src=x onerror=alert(1)&gt; &amp; "quotes"'* ]] || fail "grid: a title with markup is not shown as text"
	[[ $d != *'<img src="x"'* ]] || fail "grid: a title was parsed as HTML"
	[[ $d == *'id="repo"'*'>web-demo<'* ]] || fail "header: no repository name"
	echo "ok: commits grid rendered ($(grep -o 'class="cell ' <<<"$d" | wc -l) cells)"
	d=$(dom "/?view=commit&sha=${regressed:0:12}")
	[[ $d == *"numwatch-runner-host --check softmax.fwd --dtype f16 --seed 3"* ]] || fail "commit page: no repro command"
	[[ $d == *'Failing seeds'* && $d == *'tail tile'* ]] || fail "commit page: no failing seeds"
	[[ $d == *"/api/v1/commits/$regressed/build-log"* ]] || fail "commit page: no build log link"
	echo "ok: commit page rendered with failing seeds and repro commands"
	d=$(dom "/?view=health")
	[[ $d == *'Runner slots'* && $d == *'>host1<'* ]] || fail "health page: no slots"
	echo "ok: health page rendered"
	d=$(dom "/?view=commit&sha=0123456789abcdef")
	[[ $d == *"unknown commit '0123456789abcdef'"* ]] || fail "an unknown commit is not reported"
	echo "ok: an unknown commit is reported"
else
	echo "skip: no chromium: pages not rendered"
fi

if command -v node >/dev/null && node -e "require.resolve('puppeteer-core')" 2>/dev/null && [[ -n $chromium ]]; then
	CHROMIUM=$chromium node "$here/web_browser.mjs" "$base" || fail "browser checks failed"
else
	echo "skip: puppeteer-core not installed: interactive browser checks not run"
fi

if [[ ${NW_WEB_KEEP:-} == 1 ]]; then
	echo "dashboard: $base  (Ctrl-C to stop)"
	wait "$NW_DAEMON_PID" || true
fi
