// The commit view: one commit's build, its per check x dtype verdicts and the
// failing seeds with their repro commands.
//   /?view=commit&sha=SHA                 SHA: 4 to 40 lowercase hex digits
//   /?view=commit&sha=SHA#CHECK/DTYPE     scrolled to that check's row
//   /?view=commit&sha=SHA#seeds-CHECK/DTYPE   to its failing seeds
// Bisections that name this commit as their culprit or started from it are
// linked at the top (from the first page of GET /api/v1/bisections).
import { ApiError, getJSON, getText } from '../api.js';
import { copyable, h } from '../dom.js';
import { badge, buildPill, commitLink, facts, heading, notice, pill, timeEl } from '../components.js';
import {
  ATTENTION,
  absTime,
  checkAnchor,
  fmtDurationMs,
  fmtInt,
  fmtNum,
  fmtRatio,
  fmtShape,
  fmtValue,
  humanKey,
  fmtPercent,
  isBisectionId,
  isId,
  isSha,
  outcomeInfo,
  regressionStateInfo,
  shortSha,
  url,
  verdictInfo,
} from '../format.js';

/** Bisections fetched to find this commit's: the newest this many. */
const BISECTIONS_SCANNED = 200;

/** Checks linked from the "Needs attention" line before the rest are summed up. */
const ATTENTION_SHOWN = 24;
/** Failing seeds shown before the rest are folded away, per check. */
const SEEDS_SHOWN = 6;
/** Evidence keys shown elsewhere or as a tooltip rather than in the evidence column. */
const EVIDENCE_HIDDEN = new Set(['baseline', 'rule', 'deterministic', 'regression', 'regression_new', 'since_introduced', 'failing_since']);

const logCache = new Map(); // cache key -> build log text (a finished build's log never changes)

function seedsAnchor(check, dtype) {
  return 'seeds-' + checkAnchor(check, dtype);
}

function hashHref(id) {
  return '#' + encodeURIComponent(id).replace(/%2F/g, '/');
}

function outcomeTone(o) {
  if (o === 'pass') return 'good';
  if (o === 'infra_error') return 'infra';
  return 'bad';
}

function ratioCell(x) {
  const n = Number(x);
  return h('td', { class: x != null && Number.isFinite(n) && n > 1 ? 'num over' : 'num' }, fmtRatio(x));
}

function countCell(x, bad) {
  const n = Number(x);
  return h('td', { class: bad && n > 0 ? 'num over' : n > 0 ? 'num warn' : 'num' }, fmtInt(x));
}

function evidenceSummary(ev) {
  if (!ev || typeof ev !== 'object') return h('span', { class: 'muted' }, '—');
  const parts = [];
  for (const k of Object.keys(ev)) {
    if (EVIDENCE_HIDDEN.has(k)) continue;
    let v = ev[k];
    if (Array.isArray(v) && v.length > 12) v = v.slice(0, 12).map(String).concat([`… +${ev[k].length - 12}`]);
    parts.push(h('span', { class: 'ev' }, h('span', { class: 'ev-k' }, humanKey(k)), ' ', fmtValue(v)));
  }
  return h('span', { class: 'evidence', title: ev.rule ? `rule: ${ev.rule}` : null }, parts.length ? parts : h('span', { class: 'muted' }, '—'));
}

/** A result's verdict as the page shows it: a regression brought in earlier and still open is open_regression. */
export function resultVerdict(k) {
  if (k && k.verdict === 'regressed' && k.regression && k.regression.new === false) return 'open_regression';
  return k ? k.verdict : null;
}

/** What a result says of regressions: the one it shows (new here, or open since), fixes or raised. */
function regressionCell(k, sha) {
  const r = k.regression && typeof k.regression === 'object' && isId(k.regression.id) ? k.regression : null;
  const parts = [];
  if (r) {
    const link = h('a', { href: url.regression(r.id), class: 'regression-link', dataset: { regression: String(r.id) } }, `regression #${r.id}`);
    if (k.verdict === 'regressed' && r.new) parts.push(h('span', null, link, h('strong', { class: 'new-here' }, ' new here')));
    else if (k.verdict === 'regressed') parts.push(h('span', null, link, ' open since ', isSha(r.new_at) && r.new_at !== sha ? commitLink(r.new_at, { check: k.check, dtype: k.dtype }) : '—'));
    else if (k.verdict === 'improved') parts.push(h('span', null, link, h('strong', { class: 'fixed-here' }, ' fixed here')));
    else parts.push(h('span', null, link, ' ', pill(regressionStateInfo(r.state).label, regressionStateInfo(r.state).tone)));
  }
  if (isSha(k.failing_since)) parts.push(h('span', { class: 'since', title: 'the check has failed at a stable rate since the commit that introduced it: a property of the feature, not a regression' }, 'failing since it was introduced at ', commitLink(k.failing_since, { check: k.check, dtype: k.dtype })));
  if (Number(k.changed_seeds) > 0) parts.push(h('span', { class: 'changed', title: 'seeds whose inputs differ from the commit before: they are not compared with it' }, `${fmtInt(k.changed_seeds)} seed${Number(k.changed_seeds) === 1 ? '' : 's'} with changed inputs`));
  return h('td', null, parts.length ? h('div', { class: 'regression-notes' }, parts) : h('span', { class: 'muted' }, '—'));
}

/** The regressions this commit brings in, still shows, or fixes: one line each, linked. */
function regressionsHere(checks, sha) {
  const seen = new Map();
  for (const k of checks) {
    const r = k.regression && typeof k.regression === 'object' && isId(k.regression.id) ? k.regression : null;
    if (r && !seen.has(String(r.id))) seen.set(String(r.id), { r, k });
  }
  if (!seen.size) return null;
  const items = [...seen.values()].sort((a, b) => Number(b.r.new) - Number(a.r.new) || Number(a.r.id) - Number(b.r.id));
  const nNew = items.filter((x) => x.k.verdict === 'regressed' && x.r.new).length;
  return h(
    'section',
    { class: `panel regressions-here${nNew ? ' has-new' : ''}`, 'aria-labelledby': 'reg-h' },
    h('h2', { id: 'reg-h' }, nNew ? `${nNew} regression${nNew === 1 ? '' : 's'} new at this commit` : 'Regressions this commit shows'),
    h(
      'ul',
      { class: 'plain-list' },
      items.map(({ r, k }) => {
        const st = regressionStateInfo(r.state);
        let what;
        if (k.verdict === 'regressed' && r.new) what = h('strong', { class: 'new-here' }, 'new at this commit');
        else if (k.verdict === 'regressed') what = h('span', null, 'still open, new at ', isSha(r.new_at) ? commitLink(r.new_at) : '—');
        else if (k.verdict === 'improved') what = h('strong', { class: 'fixed-here' }, 'fixed by this commit');
        else what = h('span', null, humanKey(String(k.verdict)));
        return h('li', null, h('a', { href: url.regression(r.id), class: 'regression-link' }, `Regression #${r.id}`), ' ', h('a', { href: url.check(k.check, k.dtype), class: 'mono' }, `${k.check} · ${k.dtype}`), ' ', what, ' ', pill(st.label, st.tone, st.help));
      }),
    ),
  );
}

function baselineCell(k) {
  const ev = k.evidence;
  const b = isSha(k.baseline) ? k.baseline : ev && typeof ev === 'object' ? ev.baseline : null;
  if (b == null) return h('td', { class: 'muted', title: 'no earlier result for this check: its history starts here' }, 'none');
  return h('td', null, commitLink(String(b)));
}

function buildSection(c) {
  const b = c.build;
  if (!b) return h('section', { class: 'panel', 'aria-labelledby': 'build-h' }, h('h2', { id: 'build-h' }, 'Build'), h('p', { class: 'muted' }, 'Not built yet.'));
  const logHref = url.buildLog(c.sha);
  const key = `${c.sha} ${b.status} ${b.started_at} ${b.duration_ms}`;
  const pre = h('pre', { class: 'log', dataset: { scrollKey: 'build-log' }, tabindex: '0' });
  // A failed build's log is what the reader came for: open it from the start.
  const details = h('details', { class: 'log-details', open: b.status !== 'ok', dataset: { key: 'build-log' } }, h('summary', null, 'Build log'), pre);
  let loading = null;
  const fill = () => {
    if (logCache.has(key)) {
      pre.textContent = logCache.get(key) || '(empty log)';
      return;
    }
    if (loading) return;
    pre.textContent = 'Loading…';
    loading = getText(logHref)
      .then((text) => {
        logCache.set(key, text);
        pre.textContent = text || '(empty log)';
      })
      .catch((e) => {
        pre.textContent = `Cannot load the build log: ${e.message}`;
      })
      .finally(() => {
        loading = null;
      });
  };
  details.addEventListener('toggle', () => {
    if (details.open) fill();
  });
  if (details.open || logCache.has(key)) fill();
  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'build-h' },
    h('h2', { id: 'build-h' }, 'Build'),
    facts([
      ['Status', buildPill(b.status)],
      ['Duration', fmtDurationMs(b.duration_ms)],
      ['Started', timeEl(b.started_at)],
      ['Host', b.host ? String(b.host) : '—'],
      ['Runner', b.runner_hash ? h('code', { title: String(b.runner_hash) }, shortSha(String(b.runner_hash), 16)) : '—'],
      ['Log', h('a', { href: logHref, target: '_blank', rel: 'noopener' }, 'build log (text)')],
    ]),
    details,
  );
}

function distinctSeeds(k) {
  return Array.isArray(k.failing_seeds) ? new Set(k.failing_seeds.map((t) => String(t.seed))).size : 0;
}

function checksTable(checks, sha) {
  let prev = null;
  const rows = checks.map((k) => {
    const id = checkAnchor(k.check, k.dtype);
    const nfail = distinctSeeds(k);
    const info = verdictInfo(resultVerdict(k));
    const repeat = k.check === prev;
    prev = k.check;
    return h(
      'tr',
      { id, class: [ATTENTION.has(info.key) && info.key !== 'build_failed' ? 'attention' : '', repeat ? 'repeat' : ''].join(' ').trim() || null },
      h('th', { scope: 'row' }, h('a', { href: url.commit(sha, k.check, k.dtype), class: 'anchor', title: 'Link to this row' }, String(k.check)), k.deterministic === false ? h('span', { class: 'nd', title: 'non-deterministic: judged statistically' }, ' ~') : null),
      h('td', null, h('a', { href: url.check(k.check, k.dtype), class: 'history-link', title: `${k.check} ${k.dtype} across commits (chart)` }, String(k.dtype))),
      h('td', null, badge(resultVerdict(k))),
      regressionCell(k, sha),
      h('td', { class: 'num' }, fmtInt(k.trials)),
      countCell(k.failures, true),
      countCell(k.infra_errors, false),
      ratioCell(k.worst_ratio),
      baselineCell(k),
      h('td', null, evidenceSummary(k.evidence)),
      h('td', null, nfail ? h('a', { href: hashHref(seedsAnchor(k.check, k.dtype)) }, `${nfail} seed${nfail === 1 ? '' : 's'} ↑`) : h('span', { class: 'muted' }, '—')),
    );
  });
  return h(
    'div',
    { class: 'table-wrap', dataset: { scrollKey: 'checks' } },
    h(
      'table',
      { class: 'data checks' },
      h('caption', { class: 'sr-only' }, 'Verdict per check and dtype'),
      h(
        'thead',
        null,
        h('tr', null, ['Check', 'dtype', 'Verdict', 'Regression', 'Trials', 'Failures', 'Infra errors', 'Worst ratio', 'Baseline', 'Evidence', 'Failing'].map((t, i) => h('th', { scope: 'col', class: i >= 4 && i <= 7 ? 'num' : null }, t))),
      ),
      h('tbody', null, rows),
    ),
  );
}

function tensorTable(tensors) {
  if (!Array.isArray(tensors) || !tensors.length) return null;
  const heads = ['Tensor', 'Ratio', 'Max abs', 'Max rel', 'Max ULP', 'Non-finite', 'Ref non-finite', 'Unwritten', 'Canary', 'Excluded', 'Worst at', 'Tail'];
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: 'data tensors' },
      h('thead', null, h('tr', null, heads.map((t, i) => h('th', { scope: 'col', class: i > 0 && i < 10 ? 'num' : null }, t)))),
      h(
        'tbody',
        null,
        tensors.map((t) => {
          const nonfiniteBad = Number(t.nonfinite) > 0 && !(Number(t.ref_nonfinite) > 0);
          return h(
            'tr',
            null,
            h('th', { scope: 'row' }, h('code', null, t.name == null ? '?' : String(t.name))),
            ratioCell(t.ratio),
            h('td', { class: 'num' }, fmtNum(t.max_abs)),
            h('td', { class: 'num' }, fmtNum(t.max_rel)),
            h('td', { class: 'num' }, t.max_ulp == null ? '—' : fmtInt(t.max_ulp)),
            h('td', { class: nonfiniteBad ? 'num over' : 'num' }, fmtInt(t.nonfinite)),
            h('td', { class: 'num' }, fmtInt(t.ref_nonfinite)),
            countCell(t.unwritten, true),
            countCell(t.canary, true),
            h('td', { class: Number(t.excluded) > 0 ? 'num warn' : 'num', title: Number(t.excluded) > 0 ? 'elements excluded as non-smooth (counted, not hidden)' : null }, fmtInt(t.excluded)),
            h('td', null, Array.isArray(t.worst) ? h('code', null, fmtShape(t.worst)) : '—'),
            h('td', null, t.tail === true ? pill('tail tile', 'warn') : t.tail === false ? 'no' : '—'),
          );
        }),
      ),
    ),
  );
}

function seedCard(seed, trials) {
  const first = trials[0];
  const repro = trials.find((t) => t.repro)?.repro;
  return h(
    'article',
    { class: 'seed' },
    h(
      'header',
      { class: 'seed-head' },
      h('h4', null, `Seed ${seed}`),
      h('span', { class: 'seed-meta' }, 'family ', h('strong', null, first.family == null ? '—' : String(first.family)), ' · shape ', h('code', null, fmtShape(first.shape))),
    ),
    repro ? copyable(String(repro), { label: 'Copy' }) : null,
    trials.map((t) =>
      h(
        'div',
        { class: 'attempt' },
        h(
          'div',
          { class: 'attempt-head' },
          h('span', null, `Attempt ${t.attempt == null ? '?' : t.attempt}`),
          pill(t.outcome == null ? 'unknown' : String(t.outcome), outcomeTone(t.outcome)),
          h('span', null, 'ratio ', h('strong', { class: Number(t.ratio) > 1 ? 'over' : null }, fmtRatio(t.ratio))),
          t.family !== first.family || fmtShape(t.shape) !== fmtShape(first.shape) ? h('span', { class: 'muted' }, `family ${t.family}, shape ${fmtShape(t.shape)}`) : null,
        ),
        t.error ? h('pre', { class: 'error-text' }, String(t.error)) : null,
        tensorTable(t.tensors),
      ),
    ),
  );
}

function seedsSection(k) {
  const bySeed = new Map();
  for (const t of k.failing_seeds) {
    const s = t.seed == null ? '?' : String(t.seed);
    if (!bySeed.has(s)) bySeed.set(s, []);
    bySeed.get(s).push(t);
  }
  const cards = [...bySeed.entries()].map(([s, ts]) => seedCard(s, ts));
  const id = seedsAnchor(k.check, k.dtype);
  const shown = cards.slice(0, SEEDS_SHOWN);
  const rest = cards.slice(SEEDS_SHOWN);
  return h(
    'section',
    { class: 'seeds', id, 'aria-labelledby': `${id}-h` },
    h(
      'h3',
      { id: `${id}-h` },
      h('span', null, `${k.check} · ${k.dtype}`),
      badge(resultVerdict(k)),
      h('span', { class: 'subtitle' }, `${bySeed.size} failing seed${bySeed.size === 1 ? '' : 's'} · ${fmtInt(k.failures)} of ${fmtInt(k.trials)} trials failed`),
      h('a', { href: url.check(k.check, k.dtype), class: 'up' }, 'history across commits'),
      h('a', { href: hashHref(checkAnchor(k.check, k.dtype)), class: 'up' }, 'its row in the table ↓'),
    ),
    shown,
    rest.length ? h('details', { class: 'more-seeds', dataset: { key: `more-${id}` } }, h('summary', null, `${rest.length} more failing seed${rest.length === 1 ? '' : 's'}`), rest) : null,
  );
}

/** The bisections that name this commit as their culprit, or started from its regression. */
function bisectionsHere(list, sha) {
  if (!Array.isArray(list) || !list.length) return null;
  const culprit = list.filter((b) => b.culprit === sha && b.outcome === 'culprit');
  const other = list.filter((b) => !culprit.includes(b));
  const item = (b) => {
    const o = outcomeInfo(b.outcome, b.state);
    return h(
      'li',
      null,
      h('a', { href: url.bisection(b.id), class: 'bisection-link' }, `Bisection #${b.id}`),
      ' ',
      h('a', { href: url.check(b.check, b.dtype), class: 'mono' }, `${b.check} · ${b.dtype}`),
      ' ',
      pill(o.label, o.tone),
      b.outcome === 'culprit' && b.culprit === sha ? ` confidence ${fmtPercent(b.confidence)}` : null,
      b.outcome === 'culprit' && b.culprit !== sha && isSha(b.culprit) ? [' → culprit ', commitLink(b.culprit)] : null,
    );
  };
  return h(
    'section',
    { class: `panel bisections-here${culprit.length ? ' is-culprit' : ''}`, 'aria-labelledby': 'bis-h' },
    h('h2', { id: 'bis-h' }, culprit.length ? `Culprit of ${culprit.length} regression${culprit.length === 1 ? '' : 's'}, named by bisection` : 'Bisections from this commit'),
    culprit.length ? h('ul', { class: 'plain-list' }, culprit.map(item)) : null,
    other.length ? [culprit.length ? h('p', { class: 'muted small' }, 'Other bisections that started from this commit:') : null, h('ul', { class: 'plain-list' }, other.map(item))] : null,
  );
}

export default {
  name: 'commit',
  nav: 'commits',

  async load(params, { signal }) {
    const sha = (params.get('sha') || '').trim().toLowerCase();
    if (!isSha(sha)) throw new ApiError(sha ? `'${sha}' is not a commit id: give 4 to 40 hex digits` : 'no commit given: add &sha=<commit id> to the URL', 400);
    // The commit API does not say which bisections blame the commit; the bisections list does.
    const [r, bis] = await Promise.all([
      getJSON(`/api/v1/commits/${sha}`, { signal }),
      getJSON(`/api/v1/bisections?limit=${BISECTIONS_SCANNED}`, { signal }).catch((e) => {
        if (e && e.name === 'AbortError') throw e;
        return null;
      }),
    ]);
    const full = r.body && r.body.sha;
    const list = bis && Array.isArray(bis.body.bisections) ? bis.body.bisections.filter((b) => isBisectionId(b.id) && (b.culprit === full || b.bad === full)) : [];
    return { data: { ...r.body, bisections_here: list }, sig: r.text + JSON.stringify(list) };
  },

  title(params, data) {
    if (data && data.sha) return `${shortSha(data.sha)} ${data.title || ''}`.trim();
    return `Commit ${params.get('sha') || ''}`.trim();
  },

  render(c, params) {
    const sha = isSha(c.sha) ? c.sha : '';
    const checks = Array.isArray(c.checks) ? c.checks : [];
    const counts = new Map();
    for (const k of checks) counts.set(verdictInfo(resultVerdict(k)).key, (counts.get(verdictInfo(resultVerdict(k)).key) || 0) + 1);
    // build_failed on every check is said once, by the commit's own verdict and build panel.
    const attention = checks.filter((k) => ATTENTION.has(verdictInfo(resultVerdict(k)).key) && k.verdict !== 'build_failed');
    const failing = checks.filter((k) => Array.isArray(k.failing_seeds) && k.failing_seeds.length);

    const head = h(
      'div',
      { class: 'view-head commit-head' },
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: url.commits() }, 'Commits'), ' › ', h('span', { class: 'sha' }, shortSha(sha))),
      heading(c.title == null ? '(no title)' : String(c.title)),
      h('div', { class: 'head-verdict' }, badge(c.verdict), c.reachable === false ? pill('not on the watched branch any more', 'warn') : null),
    );

    const meta = h(
      'section',
      { class: 'panel', 'aria-label': 'Commit' },
      facts([
        ['Commit', copyable(sha, { label: 'Copy', block: false })],
        ['Parent', c.parent ? commitLink(String(c.parent), { n: 12 }) : h('span', { class: 'muted' }, 'none (root commit)')],
        ['Author', h('span', null, c.author == null ? '—' : String(c.author), c.email ? h('span', { class: 'muted' }, ` <${c.email}>`) : null)],
        ['Committed', h('span', null, absTime(c.committed_at), ' · ', timeEl(c.committed_at))],
        ['Position', c.position == null ? '—' : `#${c.position} on the branch`],
      ]),
    );

    const summary = h(
      'p',
      { class: 'summary' },
      `${checks.length} check × dtype result${checks.length === 1 ? '' : 's'}: `,
      [...counts.entries()].map(([k, n]) => h('span', { class: 'count-chip' }, badge(k), h('span', { class: 'n' }, String(n)))),
    );
    const attentionList = attention.length
      ? h(
          'nav',
          { class: 'attention-list', 'aria-label': 'Checks that need attention' },
          h('span', null, 'Needs attention: '),
          attention.slice(0, ATTENTION_SHOWN).map((k, i) => [i ? ' ' : '', h('a', { href: hashHref(k.failing_seeds?.length ? seedsAnchor(k.check, k.dtype) : checkAnchor(k.check, k.dtype)), class: 'chip' }, badge(resultVerdict(k)), ` ${k.check} · ${k.dtype}`)]),
          attention.length > ATTENTION_SHOWN
            ? h('a', { href: url.commit(sha, null, null, { show: 'problems' }) + '#results-h', class: 'more' }, `and ${attention.length - ATTENTION_SHOWN} more`)
            : null,
        )
      : null;

    const onlyProblems = params && params.get('show') === 'problems';
    const shown = onlyProblems ? checks.filter((k) => verdictInfo(k.verdict).key !== 'clean') : checks;
    const filter = h(
      'div',
      { class: 'segmented', role: 'group', 'aria-label': 'Which results to list' },
      h('a', { href: url.commit(sha), 'aria-current': onlyProblems ? null : 'true', 'data-keep-scroll': true }, `All (${checks.length})`),
      h('a', { href: url.commit(sha, null, null, { show: 'problems' }), 'aria-current': onlyProblems ? 'true' : null, 'data-keep-scroll': true }, `Not clean (${checks.filter((k) => verdictInfo(k.verdict).key !== 'clean').length})`),
    );

    const checksPart = checks.length
      ? [summary, attentionList]
      : [notice('info', c.verdict === 'build_failed' ? 'No checks ran: the build failed.' : 'No check results yet.', c.verdict === 'build_failed' ? 'See the build log above.' : 'They appear here as trials finish; this page refreshes by itself.')];

    return h(
      'section',
      { class: 'view view-commit' },
      head,
      regressionsHere(checks, sha),
      bisectionsHere(c.bisections_here, sha),
      h('div', { class: 'panels' }, meta, buildSection(c)),
      h('section', { 'aria-labelledby': 'checks-h' }, h('h2', { id: 'checks-h' }, 'Checks'), checksPart),
      failing.length ? h('section', { 'aria-labelledby': 'seeds-h' }, h('h2', { id: 'seeds-h' }, 'Failing seeds'), failing.map(seedsSection)) : null,
      checks.length
        ? h(
            'section',
            { 'aria-labelledby': 'results-h' },
            h('div', { class: 'section-head' }, h('h2', { id: 'results-h' }, 'Results per check and dtype'), filter),
            shown.length ? checksTable(shown, sha) : h('p', { class: 'muted' }, 'Every check is clean.'),
          )
        : null,
    );
  },

  /** After a page's first render and on hash changes: bring the URL's fragment into view. */
  reveal() {
    let id = '';
    try {
      id = decodeURIComponent(location.hash.slice(1));
    } catch {
      return false;
    }
    const el = id && document.getElementById(id);
    if (!el) return false;
    el.scrollIntoView({ block: 'start' });
    el.classList.remove('flash');
    void el.offsetWidth; // restart the highlight animation
    el.classList.add('flash');
    return true;
  },
};
