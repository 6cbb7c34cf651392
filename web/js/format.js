// Formatting and the verdict vocabulary. Pure functions (no DOM), so that they
// can be unit-tested under node (tests/integration/web_unit.mjs).

/** The verdicts of PRODUCT.md, in legend order, with a glyph so colour is never the only cue. */
export const VERDICTS = [
  { key: 'clean', label: 'clean', glyph: '', help: 'passes, no worse than its baseline' },
  { key: 'regressed', label: 'regressed', glyph: '✕', help: 'a regression new at this commit: worse than the commit before it' },
  { key: 'open_regression', label: 'open regression', glyph: '⋯', help: 'still shows a regression that an earlier commit brought in (not new here)' },
  { key: 'improved', label: 'improved', glyph: '▲', help: 'better than the commit before it (a fix closes the regression it shows)' },
  { key: 'flaky', label: 'flaky', glyph: '≈', help: 'fails at a stable low rate on both sides, or since the check was introduced' },
  { key: 'check_changed', label: 'check changed', glyph: '⇄', help: 'the check’s inputs changed at this commit: its seeds are not compared with before' },
  { key: 'pending', label: 'pending', glyph: '·', help: 'not decided yet' },
  { key: 'build_failed', label: 'build failed', glyph: '', help: 'the commit did not build' },
  { key: 'infra_error', label: 'infra error', glyph: '!', help: 'infrastructure fault, not counted against the commit' },
  { key: 'none', label: 'not run', glyph: '', help: 'no result for this check at this commit' },
];
const BY_KEY = new Map(VERDICTS.map((v) => [v.key, v]));

/** Metadata for a verdict string; unknown strings (a newer daemon) keep their own text. */
export function verdictInfo(v) {
  if (v == null) return BY_KEY.get('none');
  return BY_KEY.get(v) || { key: 'unknown', label: String(v), glyph: '?', help: 'verdict unknown to this dashboard' };
}

/** A CSS class for a verdict; only known keys become class names. */
export function verdictClass(v) {
  return 'v-' + verdictInfo(v).key;
}

/** Verdicts counted as "something to look at" (for summaries and ordering). */
export const ATTENTION = new Set(['regressed', 'open_regression', 'flaky', 'infra_error', 'build_failed', 'improved', 'check_changed']);

/** The regression a commits-list entry's cell points at ({id, new}), or null. */
export function cellRegression(commit, key) {
  const r = commit && commit.regressions && typeof commit.regressions === 'object' ? commit.regressions[key] : null;
  return r && typeof r === 'object' && isId(r.id) ? r : null;
}

/**
 * The verdict shown in a grid cell: the check's own verdict when it has one
 * (a regressed one that only still shows an open regression, brought in by an
 * earlier commit, is open_regression); otherwise what the commit's state
 * implies (no build yet or still running: pending; build failed:
 * build_failed; finished without it: not run).
 */
export function cellVerdict(commit, key) {
  const v = commit.verdicts ? commit.verdicts[key] : undefined;
  if (v === 'regressed') {
    const r = cellRegression(commit, key);
    return r && r.new === false ? 'open_regression' : v;
  }
  if (v != null) return v;
  if (commit.verdict === 'build_failed') return 'build_failed';
  if (commit.verdict === 'pending' || commit.build == null) return 'pending';
  return 'none';
}

/**
 * A grid cell's tooltip after its label: which regression it shows (new here
 * or still open), fixes or raised; for a flaky or changed check its failures
 * and rate, since when it fails (a check failing since it was introduced),
 * and how many seeds changed their inputs. Pure, for the unit tests.
 */
export function cellNote(commit, key) {
  const v = commit && commit.verdicts ? commit.verdicts[key] : undefined;
  const r = cellRegression(commit, key);
  const d = commit && commit.details && typeof commit.details === 'object' ? commit.details[key] : null;
  const parts = [];
  if (r) {
    if (v === 'regressed') parts.push(r.new === false ? `still shows regression #${r.id} (open, brought in earlier)` : `regression #${r.id}, new at this commit`);
    else if (v === 'improved') parts.push(`fixes regression #${r.id}`);
    else parts.push(`regression #${r.id}`);
  }
  if (d && typeof d === 'object') {
    const t = Number(d.trials);
    const f = Number(d.failures);
    if (Number.isFinite(t) && t > 0 && Number.isFinite(f)) parts.push(`${f}/${t} failing (${fmtPercent(f / t)})`);
    if (isSha(d.failing_since)) parts.push(`failing since ${shortSha(d.failing_since)}, where the check was introduced`);
    if (Number(d.changed_seeds) > 0) parts.push(`${d.changed_seeds} seed${Number(d.changed_seeds) === 1 ? '' : 's'} with changed inputs`);
  }
  return parts.join('; ');
}

export const SHA_RE = /^[0-9a-f]{4,40}$/;

export function isSha(s) {
  return typeof s === 'string' && SHA_RE.test(s);
}

export function shortSha(sha, n = 8) {
  return typeof sha === 'string' ? sha.slice(0, n) : '';
}

/** Parses an API timestamp; null when missing or unparsable. */
export function parseTime(s) {
  if (s == null || s === '') return null;
  // PostgreSQL's json gives "2026-01-02T03:04:05+00:00" or "...05.123456+00:00".
  const t = Date.parse(String(s));
  return Number.isFinite(t) ? t : null;
}

/** "just now", "42 s ago", "5 min ago", "3 h ago", "4 d ago", then the date. */
export function relTime(s, now = Date.now()) {
  const t = parseTime(s);
  if (t == null) return '—';
  const d = Math.round((now - t) / 1000);
  if (d < -60) return 'in the future (' + isoDate(t) + ')';
  if (d < 5) return 'just now';
  if (d < 60) return `${d} s ago`;
  if (d < 3600) return `${Math.floor(d / 60)} min ago`;
  if (d < 86400) return `${Math.floor(d / 3600)} h ago`;
  if (d < 30 * 86400) return `${Math.floor(d / 86400)} d ago`;
  return isoDate(t);
}

function pad(n) {
  return String(n).padStart(2, '0');
}

/** Local date "2026-01-02". */
export function isoDate(t) {
  const d = new Date(t);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

/** Local "2026-01-02 03:04:05 (UTC+01:00)", unambiguous for bug reports. */
export function absTime(s) {
  const t = parseTime(s);
  if (t == null) return '—';
  const d = new Date(t);
  const off = -d.getTimezoneOffset();
  const sign = off >= 0 ? '+' : '-';
  const tz = `UTC${sign}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)}`;
  return `${isoDate(t)} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} (${tz})`;
}

/** A ratio to the tolerance budget: 3 significant digits, "—" when absent. */
export function fmtRatio(x) {
  if (x == null || x === '') return '—';
  const n = Number(x);
  if (!Number.isFinite(n)) return String(x);
  if (n === 0) return '0';
  const a = Math.abs(n);
  if (a >= 1e5 || a < 1e-3) return n.toExponential(2);
  if (a >= 100) return n.toFixed(0);
  return n.toPrecision(3);
}

/** A measured error (max_abs, max_rel): 3 significant digits, exponent when small or large. */
export function fmtNum(x) {
  if (x == null || x === '') return '—';
  const n = Number(x);
  if (!Number.isFinite(n)) return String(x);
  if (n === 0) return '0';
  const a = Math.abs(n);
  if (a >= 1e4 || a < 1e-2) return n.toExponential(2);
  return String(Number(n.toPrecision(3)));
}

/** An integer count with thin grouping; "—" when absent. */
export function fmtInt(x) {
  if (x == null || x === '') return '—';
  const n = Number(x);
  if (!Number.isFinite(n)) return String(x);
  return n.toLocaleString('en-US');
}

/** 1234 ms -> "1.2 s", 95000 -> "1 min 35 s". */
export function fmtDurationMs(ms) {
  if (ms == null) return '—';
  const n = Number(ms);
  if (!Number.isFinite(n)) return '—';
  if (n < 1000) return `${Math.round(n)} ms`;
  return fmtSeconds(n / 1000);
}

/** Seconds -> "42 s", "3 min 5 s", "2 h 10 min", "3 d 4 h". */
export function fmtSeconds(sec) {
  if (sec == null || !Number.isFinite(Number(sec))) return '—';
  let s = Number(sec);
  if (s < 60) return `${s < 10 ? s.toFixed(1).replace(/\.0$/, '') : Math.round(s)} s`;
  s = Math.round(s);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** A shape array as "[2, 1003]"; anything else as text. */
export function fmtShape(shape) {
  if (Array.isArray(shape)) return '[' + shape.map((d) => String(d)).join(', ') + ']';
  if (shape == null) return '—';
  return String(shape);
}

/** A short rendering of any JSON value (evidence fields). */
export function fmtValue(v) {
  if (v == null) return '—';
  if (Array.isArray(v)) return v.length ? v.map(fmtValue).join(', ') : 'none';
  if (typeof v === 'object') return JSON.stringify(v);
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  return String(v);
}

/** "confirmed_seeds" -> "confirmed seeds". */
export function humanKey(k) {
  return String(k).replace(/_/g, ' ');
}

/** A page number from the query string: an integer >= 1, else 1. */
export function parsePage(s) {
  if (s == null || !/^\d{1,7}$/.test(s)) return 1;
  const n = parseInt(s, 10);
  return n >= 1 ? n : 1;
}

/**
 * Dashboard URLs. These are the stable, pasteable links (README in web/).
 * Built here and nowhere else.
 */
export const url = {
  commits(page = 1) {
    return page > 1 ? `/?page=${page}` : '/';
  },
  commit(sha, check, dtype, { show } = {}) {
    const base = `/?view=commit&sha=${encodeURIComponent(sha)}${show ? `&show=${encodeURIComponent(show)}` : ''}`;
    return check ? `${base}#${encodeURIComponent(checkAnchor(check, dtype)).replace(/%2F/g, '/')}` : base;
  },
  health() {
    return '/?view=health';
  },
  checks() {
    return '/?view=checks';
  },
  /** One check's history; dtype and page are optional (page 1 = the newest commits). */
  check(name, dtype, { page } = {}) {
    let u = `/?view=check&check=${encodeURIComponent(name)}`;
    if (dtype) u += `&dtype=${encodeURIComponent(dtype)}`;
    if (page > 1) u += `&page=${page}`;
    return u;
  },
  bisections(page = 1) {
    return page > 1 ? `/?view=bisections&page=${page}` : '/?view=bisections';
  },
  bisection(id) {
    return `/?view=bisection&id=${encodeURIComponent(id)}`;
  },
  /** The regressions list; state, check, dtype filter it ('' or absent: any). */
  regressions({ state, check, dtype, page } = {}) {
    let u = '/?view=regressions';
    if (state) u += `&state=${encodeURIComponent(state)}`;
    if (check) u += `&check=${encodeURIComponent(check)}`;
    if (dtype) u += `&dtype=${encodeURIComponent(dtype)}`;
    if (page > 1) u += `&page=${page}`;
    return u;
  },
  regression(id) {
    return `/?view=regression&id=${encodeURIComponent(id)}`;
  },
  buildLog(sha) {
    return `/api/v1/commits/${encodeURIComponent(sha)}/build-log`;
  },
};

/** The element id of a check x dtype row on the commit page, also its URL fragment. */
export function checkAnchor(check, dtype) {
  return dtype ? `${check}/${dtype}` : String(check);
}

/** Splits a queue key "trials_running" into ["trials", "running"] (the kind may hold '_'). */
export function splitQueueKey(k) {
  const i = String(k).lastIndexOf('_');
  return i > 0 ? [k.slice(0, i), k.slice(i + 1)] : [String(k), ''];
}

/** Check names and dtypes as the API takes them (docs/api.md, "Names"). */
export const NAME_RE = /^[A-Za-z0-9._+:-]{1,63}$/;

export function isName(s) {
  return typeof s === 'string' && NAME_RE.test(s);
}

/** A database id (a bisection's, a regression's): 1 to 18 digits, not 0. */
export function isId(s) {
  return (typeof s === 'string' || typeof s === 'number') && /^[0-9]{1,18}$/.test(String(s)) && Number(s) > 0;
}

/** A bisection id: 1 to 18 digits. */
export function isBisectionId(s) {
  return isId(s);
}

/** Regression states (docs/api.md, "Regression states"), with words and a tone. */
const REGRESSION_STATES = {
  open: { label: 'open', tone: 'bad', help: 'not bisected yet' },
  bisecting: { label: 'bisecting', tone: 'busy', help: 'a bisection looks for the commit that brought it in' },
  culprit: { label: 'culprit found', tone: 'bad', help: 'a bisection named the commit that brought it in; still open' },
  no_culprit: { label: 'no culprit', tone: 'warn', help: 'the bisection blamed no commit; still open' },
  check_changed: { label: 'check changed', tone: 'neutral', help: 'the failures came with inputs the check did not have before: nobody is blamed' },
  fixed: { label: 'fixed', tone: 'good', help: 'a later commit fixed it' },
  withdrawn: { label: 'withdrawn', tone: 'neutral', help: 'the verdict that raised it was judged again and is gone' },
};

export function regressionStateInfo(state) {
  return REGRESSION_STATES[state] || { label: state == null ? 'unknown' : String(state).replace(/_/g, ' '), tone: 'neutral', help: '' };
}

/** Whether a regression in this state is still open (later commits may show it). */
export function regressionActive(state) {
  return state === 'open' || state === 'bisecting' || state === 'culprit' || state === 'no_culprit';
}

/**
 * A failure rate as the statistics wrote it ({trials, failures, rate,
 * wilson95: [lo, hi]}): "3/64 failing (4.69%, 95% CI 1.6%–13%)"; '—' when
 * there is none.
 */
export function fmtRate(side) {
  if (!side || typeof side !== 'object') return '—';
  const t = Number(side.trials);
  const f = Number(side.failures);
  if (!Number.isFinite(t) || !Number.isFinite(f)) return '—';
  const rate = side.rate != null && Number.isFinite(Number(side.rate)) ? Number(side.rate) : t > 0 ? f / t : null;
  let s = `${fmtInt(f)}/${fmtInt(t)} failing`;
  const w = Array.isArray(side.wilson95) && side.wilson95.length === 2 ? side.wilson95.map(Number) : null;
  if (rate != null) s += ` (${fmtPercent(rate)}${w && w.every(Number.isFinite) ? `, 95% CI ${fmtPercent(w[0])}–${fmtPercent(w[1])}` : ''})`;
  return s;
}

/** A probability or rate as a percentage: "99.5%", "0.01%", "<0.01%", "0%". */
export function fmtPercent(x, digits = 1) {
  if (x == null || x === '') return '—';
  const n = Number(x);
  if (!Number.isFinite(n)) return String(x);
  if (n === 0) return '0%';
  const p = n * 100;
  if (p >= 99.95 && p < 100) return '>99.9%';
  if (p < 0.01) return '<0.01%';
  if (p < 1) return `${p.toFixed(2)}%`;
  return `${p.toFixed(digits).replace(/\.0+$/, '')}%`;
}

/** Bisection outcomes (docs/api.md, "Bisection states and outcomes"), with a tone and words. */
const OUTCOMES = {
  culprit: { label: 'culprit found', tone: 'bad' },
  no_culprit: { label: 'no culprit (a flake)', tone: 'good' },
  withdrawn: { label: 'culprit withdrawn', tone: 'warn' },
  error: { label: 'error', tone: 'bad' },
};

export function outcomeInfo(outcome, state) {
  if (outcome == null) {
    if (state === 'confirming') return { label: 'confirming', tone: 'busy' };
    if (state === 'running') return { label: 'searching', tone: 'busy' };
    return { label: state == null ? 'unknown' : String(state), tone: 'neutral' };
  }
  return OUTCOMES[outcome] || { label: String(outcome).replace(/_/g, ' '), tone: 'neutral' };
}

/** Posterior flags of a commit in a bisection's range: 1 does not build, 2 same binary as its parent. */
export const FLAG_UNBUILDABLE = 1;
export const FLAG_SAME_BINARY = 2;

export function flagWords(flags) {
  const n = Number(flags) || 0;
  const out = [];
  if (n & FLAG_UNBUILDABLE) out.push('does not build');
  if (n & FLAG_SAME_BINARY) out.push('same binary as its parent');
  return out;
}

/**
 * The rows of a bisection's range to show: every commit when the range is
 * short, else only those worth reading (probability at least minP, probed,
 * flagged, the bad commit or the culprit), with runs of the rest folded into
 * gap rows {gap: N}. Pure, for the unit tests.
 */
export function foldRange(rows, keep, { max = 300 } = {}) {
  if (rows.length <= max) return rows.map((r) => ({ row: r }));
  const out = [];
  let gap = 0;
  for (const r of rows) {
    if (keep(r)) {
      if (gap) out.push({ gap });
      gap = 0;
      out.push({ row: r });
    } else gap++;
  }
  if (gap) out.push({ gap });
  return out;
}
