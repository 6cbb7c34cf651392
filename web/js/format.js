// Formatting and the verdict vocabulary. Pure functions (no DOM), so that they
// can be unit-tested under node (tests/integration/web_unit.mjs).

/** The verdicts of PRODUCT.md, in legend order, with a glyph so colour is never the only cue. */
export const VERDICTS = [
  { key: 'clean', label: 'clean', glyph: '', help: 'passes, no worse than its baseline' },
  { key: 'regressed', label: 'regressed', glyph: '✕', help: 'fails where the baseline passes' },
  { key: 'improved', label: 'improved', glyph: '▲', help: 'passes where the baseline failed' },
  { key: 'flaky', label: 'flaky', glyph: '≈', help: 'fails at a stable low rate on both sides' },
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
export const ATTENTION = new Set(['regressed', 'flaky', 'infra_error', 'build_failed', 'improved']);

/**
 * The verdict shown in a grid cell: the check's own verdict when it has one;
 * otherwise what the commit's state implies (no build yet or still running:
 * pending; build failed: build_failed; finished without it: not run).
 */
export function cellVerdict(commit, key) {
  const v = commit.verdicts ? commit.verdicts[key] : undefined;
  if (v != null) return v;
  if (commit.verdict === 'build_failed') return 'build_failed';
  if (commit.verdict === 'pending' || commit.build == null) return 'pending';
  return 'none';
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

/** A bisection id: 1 to 18 digits. */
export function isBisectionId(s) {
  return (typeof s === 'string' || typeof s === 'number') && /^[0-9]{1,18}$/.test(String(s)) && Number(s) > 0;
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
