// The check view: one check x dtype across commits. Error ratio (worst and
// median, log scale) and failure rate, plotted with uPlot, with the regressed
// commits and the culprits named by bisections marked; the same figures in a
// table below; PAGE_SIZE commits a page, newest page first.
//   /?view=check&check=NAME                 the check's first dtype
//   /?view=check&check=NAME&dtype=D         that dtype
//   /?view=check&check=NAME&dtype=D&page=N  older commits
import { ApiError, getJSON } from '../api.js';
import { appendChildren, h } from '../dom.js';
import { badge, commitLink, heading, notice, pill } from '../components.js';
import { markerPlugin, mountChart, themeColors } from '../chart.js';
import { fmtInt, fmtPercent, fmtRate, fmtRatio, isId, isName, isSha, outcomeInfo, parsePage, shortSha, url, verdictInfo } from '../format.js';
import { statePill } from './regressions.js';

export const PAGE_SIZE = 200;
const CHART_HEIGHT = 240;

/** A series point's verdict as the page shows it: regressed but not new there is open_regression. */
export function pointVerdict(s) {
  return s && s.verdict === 'regressed' && s.regression_new === false ? 'open_regression' : s ? s.verdict : null;
}

/**
 * What the charts and the table draw, from the API's answer (series oldest
 * first). Pure, for the unit tests: x is the commit's position on the branch;
 * ratios that a log scale cannot show (<= 0) are null; regressed holds the
 * worst ratio (and regressedRate the failure rate) at commits where a
 * regression is new only (not at those that merely still show an open one);
 * culprits are the bisections of this dtype that named a culprit in view.
 */
export function chartData(series, bisections, dtype) {
  const rows = (Array.isArray(series) ? series : []).filter((s) => !dtype || s.dtype === dtype);
  rows.sort((a, b) => Number(a.position) - Number(b.position));
  const pos = (v) => (v == null || !(Number(v) > 0) ? null : Number(v));
  const num = (v) => (v == null || !Number.isFinite(Number(v)) ? null : Number(v));
  const xs = rows.map((s) => Number(s.position));
  const worst = rows.map((s) => pos(s.worst_ratio));
  const median = rows.map((s) => pos(s.median_ratio));
  const rate = rows.map((s) => (num(s.failure_rate) == null ? null : num(s.failure_rate) * 100));
  const isReg = rows.map((s) => pointVerdict(s) === 'regressed');
  const regressed = rows.map((s, i) => (isReg[i] ? worst[i] ?? median[i] ?? 1 : null));
  const regressedRate = rows.map((s, i) => (isReg[i] ? rate[i] ?? 0 : null));
  const posBySha = new Map(rows.map((s) => [s.sha, Number(s.position)]));
  const mine = (Array.isArray(bisections) ? bisections : []).filter((b) => !dtype || b.dtype === dtype);
  const culprits = [];
  for (const b of mine) {
    if (b.outcome === 'culprit' && isSha(b.culprit) && posBySha.has(b.culprit)) culprits.push({ x: posBySha.get(b.culprit), id: b.id, sha: b.culprit, confidence: b.confidence });
  }
  return { rows, xs, worst, median, rate, regressed, regressedRate, culprits, bisections: mine, nRegressed: isReg.filter(Boolean).length };
}

function culpritMarkers(d) {
  const byX = new Map();
  for (const c of d.culprits) {
    if (!byX.has(c.x)) byX.set(c.x, []);
    byX.get(c.x).push(`#${c.id}`);
  }
  return [...byX.entries()].map(([x, ids]) => ({ x, label: `culprit ${ids.join(' ')}` }));
}

/**
 * Which splits of a log axis get a label, tick and grid line: 1, 2 and 5 of
 * each decade when the axis spans at most two decades, else powers of ten.
 */
export function logSplits(splits) {
  const vals = splits.filter((v) => v > 0);
  const decades = vals.length ? Math.log10(Math.max(...vals) / Math.min(...vals)) : 0;
  const keep = decades <= 2 ? [1, 2, 5] : [1];
  return splits.map((v) => {
    if (!(v > 0)) return null;
    const m = Math.round((v / 10 ** Math.floor(Math.log10(v) + 1e-9)) * 1000) / 1000;
    return keep.includes(m) ? v : null;
  });
}

const X_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

function baseOpts(uPlot, c, d, { title, y, log, series, markers, onHover, onPick }) {
  const axis = { stroke: c.muted, grid: { stroke: c.grid, width: 1 }, ticks: { stroke: c.grid, width: 1 } };
  const filt = (u, splits) => logSplits(splits);
  const yAxis = log ? { ...axis, size: 60, filter: filt, grid: { ...axis.grid, filter: filt }, ticks: { ...axis.ticks, filter: filt } } : { ...axis, size: 60 };
  return {
    title,
    height: CHART_HEIGHT,
    cursor: { sync: { key: 'nw-check' }, y: false, points: { size: 8 }, drag: { x: false, y: false } },
    legend: { live: true },
    scales: { x: { time: false }, y },
    axes: [
      { ...axis, label: 'commit position on the branch', incrs: X_INCRS, values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? `#${v}` : '')) },
      yAxis,
    ],
    series: [{ label: 'commit', value: (u, v) => (v == null ? '—' : `#${v}`) }, ...series],
    plugins: [markerPlugin(markers, c.culprit, c.bg)],
    hooks: {
      setCursor: [(u) => onHover(u.cursor.idx)],
      ready: [
        (u) => {
          u.over.style.cursor = 'pointer';
          u.over.addEventListener('click', () => {
            if (u.cursor.idx != null) onPick(u.cursor.idx);
          });
        },
      ],
    },
  };
}

function charts(d, check, dtype) {
  const readout = h('p', { class: 'chart-readout', 'aria-live': 'off' }, 'Point at the charts to read a commit’s figures; click to open it.');
  const onHover = (i) => {
    const s = i == null ? null : d.rows[i];
    if (!s) return;
    const culprit = d.culprits.filter((c) => c.sha === s.sha);
    readout.replaceChildren();
    appendChildren(
      readout,
      [h('span', { class: 'sha' }, `#${s.position} ${shortSha(s.sha)}`),
      ' ',
      h('span', { class: 'readout-title' }, s.title == null ? '' : String(s.title)),
      ' ',
      badge(pointVerdict(s)),
      culprit.length ? [' ', pill(`culprit (bisection ${culprit.map((c) => '#' + c.id).join(', ')})`, 'bad')] : null,
      h('span', { class: 'muted' }, ` worst ${fmtRatio(s.worst_ratio)} · median ${fmtRatio(s.median_ratio)} · ${fmtInt(s.failures)}/${fmtInt(s.trials)} failed (${fmtPercent(s.failure_rate)})`)],
    );
  };
  const onPick = (i) => {
    const s = d.rows[i];
    if (s && isSha(s.sha)) window.dispatchEvent(new CustomEvent('nw:navigate', { detail: url.commit(s.sha, check, dtype) }));
  };
  const markers = culpritMarkers(d);
  const label = (what) =>
    `${what} of ${check} ${dtype} across ${d.rows.length} commits (#${d.xs[0]} to #${d.xs[d.xs.length - 1]}); ${d.nRegressed} regressed, ${d.culprits.length} culprit${d.culprits.length === 1 ? '' : 's'} marked. The table below has the same figures.`;
  const ratioBox = h('div', { class: 'chart-box', id: 'chart-ratio', role: 'img', 'aria-label': label('Worst and median error ratio') }, h('p', { class: 'loading' }, 'Loading the chart…'));
  const rateBox = h('div', { class: 'chart-box', id: 'chart-rate', role: 'img', 'aria-label': label('Failure rate') }, h('p', { class: 'loading' }, 'Loading the chart…'));

  mountChart(ratioBox, (uPlot) => {
    const c = themeColors();
    const pts = (stroke, size) => ({ show: true, size, stroke, fill: stroke });
    return [
      baseOpts(uPlot, c, d, {
        title: 'Error ratio (error / tolerance; above 1 fails)',
        y: { distr: 3, log: 10 },
        log: true,
        markers,
        onHover,
        onPick,
        series: [
          { label: 'worst', stroke: c.worst, width: 2, points: pts(c.worst, 5), value: (u, v) => fmtRatio(v) },
          { label: 'median', stroke: c.median, width: 1.5, dash: [4, 3], points: pts(c.median, 4), value: (u, v) => fmtRatio(v) },
          { label: 'budget (1)', stroke: c.budget, width: 1, dash: [2, 4], points: { show: false }, value: () => '1' },
          { label: '✕ regressed', stroke: c.regressed, fill: c.regressed, width: 0, paths: () => null, points: { show: true, size: 13, width: 3, stroke: c.regressed, fill: c.bg }, value: (u, v) => (v == null ? '—' : 'yes') },
        ],
      }),
      [d.xs, d.worst, d.median, d.xs.map(() => 1), d.regressed],
    ];
  });
  mountChart(rateBox, (uPlot) => {
    const c = themeColors();
    return [
      baseOpts(uPlot, c, d, {
        title: 'Failure rate (failing seeds / trials)',
        y: { range: (u, min, max) => [0, Math.max(5, Math.ceil(((max || 0) * 1.15) / 5) * 5)] },
        markers,
        onHover,
        onPick,
        series: [
          { label: 'failure rate', stroke: c.rate, fill: c.rate, width: 1, paths: uPlot.paths.bars({ size: [0.6, 40, 3] }), points: { show: false }, value: (u, v) => (v == null ? '—' : `${Number(v).toFixed(2).replace(/\.?0+$/, '')}%`) },
          { label: '✕ regressed', stroke: c.regressed, width: 0, paths: () => null, points: { show: true, size: 13, width: 3, stroke: c.regressed, fill: c.bg }, value: (u, v) => (v == null ? '—' : 'yes') },
        ],
      }),
      [d.xs, d.rate, d.regressedRate],
    ];
  });

  return h(
    'section',
    { class: 'charts', 'aria-labelledby': 'charts-h' },
    h('h2', { id: 'charts-h', class: 'sr-only' }, 'Charts'),
    h(
      'ul',
      { class: 'legend chart-legend', 'aria-label': 'Marks on the charts' },
      h('li', null, h('span', { class: 'mark-regressed', 'aria-hidden': 'true' }), 'commit a regression is new at (ring)'),
      h('li', null, h('span', { class: 'mark-culprit', 'aria-hidden': 'true' }), 'culprit named by a bisection (dashed line)'),
      h('li', null, h('span', { class: 'mark-budget', 'aria-hidden': 'true' }), 'ratio 1: the tolerance budget'),
    ),
    ratioBox,
    rateBox,
    readout,
  );
}

function pager(check, dtype, page, pages, total) {
  const first = total ? (page - 1) * PAGE_SIZE + 1 : 0;
  const last = Math.min(total, page * PAGE_SIZE);
  const newer = page > 1 ? h('a', { href: url.check(check, dtype, { page: page - 1 }), rel: 'prev', class: 'btn' }, '‹ Newer') : h('span', { class: 'btn disabled', 'aria-disabled': 'true' }, '‹ Newer');
  const older = page < pages ? h('a', { href: url.check(check, dtype, { page: page + 1 }), rel: 'next', class: 'btn' }, 'Older ›') : h('span', { class: 'btn disabled', 'aria-disabled': 'true' }, 'Older ›');
  return h('nav', { class: 'pager', 'aria-label': 'Pages of commits' }, newer, h('span', { class: 'pager-pos' }, total ? `commits ${first}–${last} of ${total}, newest first` : '0 commits', pages > 1 ? ` · page ${page} of ${pages}` : ''), older);
}

function bisectionList(list, check) {
  if (!list.length) return null;
  return h(
    'section',
    { class: 'panel check-bisections', 'aria-labelledby': 'cb-h' },
    h('h2', { id: 'cb-h' }, `Bisections (${list.length})`),
    h(
      'ul',
      { class: 'plain-list' },
      [...list]
        .sort((a, b) => Number(b.id) - Number(a.id))
        .map((b) => {
          const o = outcomeInfo(b.outcome, b.state);
          return h(
            'li',
            null,
            h('a', { href: url.bisection(b.id) }, `#${b.id}`),
            ' ',
            pill(o.label, o.tone),
            ' from ',
            commitLink(b.bad, { check, dtype: b.dtype }),
            b.outcome === 'culprit' && isSha(b.culprit) ? [': culprit ', commitLink(b.culprit, { check, dtype: b.dtype, cls: 'sha culprit-sha' }), b.confidence != null ? ` (${fmtPercent(b.confidence)} sure)` : null] : null,
          );
        }),
    ),
  );
}

/** The check's regressions (of this dtype), newest first, linked to their pages. */
function regressionList(list, check, dtype) {
  const mine = (Array.isArray(list) ? list : []).filter((r) => !dtype || r.dtype === dtype);
  if (!mine.length) return null;
  return h(
    'section',
    { class: 'panel check-regressions', 'aria-labelledby': 'cr-h' },
    h('h2', { id: 'cr-h' }, `Regressions (${mine.length})`, ' ', h('a', { href: url.regressions({ check, dtype }), class: 'small' }, 'all of them')),
    h(
      'ul',
      { class: 'plain-list' },
      mine.map((r) =>
        h(
          'li',
          null,
          isId(r.id) ? h('a', { href: url.regression(r.id), class: 'regression-link' }, `#${r.id}`) : String(r.id),
          ' ',
          statePill(r.state),
          ' new at ',
          commitLink(r.new_at, { check, dtype: r.dtype }),
          isSha(r.fixed) ? [' · fixed at ', commitLink(r.fixed, { check, dtype: r.dtype })] : null,
          h('span', { class: 'muted small' }, ` · before ${fmtRate(r.rate_before)} · after ${fmtRate(r.rate_after)}`),
        ),
      ),
    ),
  );
}

function table(d, check, dtype) {
  const culpritOf = new Map();
  for (const c of d.culprits) culpritOf.set(c.sha, (culpritOf.get(c.sha) || []).concat([c.id]));
  const startedAt = new Map();
  for (const b of d.bisections) if (isSha(b.bad)) startedAt.set(b.bad, (startedAt.get(b.bad) || []).concat([b.id]));
  const rows = [...d.rows].reverse().map((s) => {
    const culprit = culpritOf.get(s.sha);
    const started = startedAt.get(s.sha);
    const rate = Number(s.failure_rate);
    return h(
      'tr',
      { class: culprit ? 'culprit-row' : verdictInfo(pointVerdict(s)).key === 'regressed' ? 'attention' : null, dataset: { sha: String(s.sha) } },
      h('td', { class: 'num' }, `#${s.position}`),
      h('th', { scope: 'row' }, commitLink(s.sha, { check, dtype })),
      h('td', { class: 'title-cell', title: s.title == null ? null : String(s.title) }, s.title == null ? '' : String(s.title)),
      h('td', null, badge(pointVerdict(s))),
      h('td', { class: 'num' }, fmtInt(s.trials)),
      h('td', { class: Number(s.failures) > 0 ? 'num over' : 'num' }, fmtInt(s.failures)),
      h('td', { class: rate > 0 ? 'num warn' : 'num' }, fmtPercent(s.failure_rate, 2)),
      h('td', { class: Number(s.worst_ratio) > 1 ? 'num over' : 'num' }, fmtRatio(s.worst_ratio)),
      h('td', { class: Number(s.median_ratio) > 1 ? 'num over' : 'num' }, fmtRatio(s.median_ratio)),
      h(
        'td',
        null,
        isId(s.regression) ? h('a', { href: url.regression(s.regression), class: 'mark regression-link' }, `${s.verdict === 'improved' ? 'fixes ' : s.regression_new ? 'new ' : ''}regression #${s.regression}`) : null,
        culprit ? culprit.map((id) => h('a', { href: url.bisection(id), class: 'mark culprit-mark' }, `culprit #${id}`)) : null,
        started ? started.filter((id) => !(culprit || []).includes(id)).map((id) => h('a', { href: url.bisection(id), class: 'mark' }, `bisection #${id}`)) : null,
      ),
    );
  });
  return h(
    'div',
    { class: 'table-wrap', dataset: { scrollKey: 'check-table' } },
    h(
      'table',
      { class: 'data check-series' },
      h('caption', { class: 'sr-only' }, `${check} ${dtype} per commit, newest first`),
      h('thead', null, h('tr', null, ['Pos.', 'Commit', 'Title', 'Verdict', 'Trials', 'Failures', 'Failure rate', 'Worst ratio', 'Median ratio', 'Regression, bisection'].map((t, i) => h('th', { scope: 'col', class: i === 0 || (i >= 4 && i <= 8) ? 'num' : null }, t)))),
      h('tbody', null, rows),
    ),
  );
}

function dtypeSwitch(check, dtypes, dtype) {
  if (dtypes.length < 2) return null;
  return h(
    'div',
    { class: 'segmented', role: 'group', 'aria-label': 'dtype' },
    dtypes.map((d) => h('a', { href: url.check(check, d), 'aria-current': d === dtype ? 'true' : null }, d)),
  );
}

export default {
  name: 'check',
  nav: 'checks',

  async load(params, { signal }) {
    const check = params.get('check') || '';
    const dtype = params.get('dtype') || '';
    if (!isName(check)) throw new ApiError(check ? `'${check}' is not a check name` : 'no check given: add &check=<name> to the URL', 400);
    if (dtype && !isName(dtype)) throw new ApiError(`'${dtype}' is not a dtype`, 400);
    const page = parsePage(params.get('page'));
    const q = `limit=${PAGE_SIZE}&offset=${(page - 1) * PAGE_SIZE}${dtype ? `&dtype=${encodeURIComponent(dtype)}` : ''}`;
    const r = await getJSON(`/api/v1/checks/${encodeURIComponent(check)}?${q}`, { signal });
    return { data: r.body, sig: r.text };
  },

  title(params) {
    const d = params.get('dtype');
    return `${params.get('check') || 'Check'}${d ? ` · ${d}` : ''}`;
  },

  render(data, params) {
    const check = String(data.check || params.get('check'));
    const dtypes = Array.isArray(data.dtypes) ? data.dtypes.map(String) : [];
    const dtype = params.get('dtype') || dtypes[0] || '';
    const page = parsePage(params.get('page'));
    const total = Number(data.total) || 0;
    const pages = Math.max(1, Math.ceil(total / PAGE_SIZE));
    const d = chartData(data.series, data.bisections, dtype);

    const head = h(
      'div',
      { class: 'view-head' },
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: url.checks() }, 'Checks'), ' › ', h('span', null, check)),
      heading(h('span', { class: 'mono' }, check), dtype ? h('span', { class: 'dtype-title' }, dtype) : null, data.deterministic === false ? pill('non-deterministic: judged statistically', 'warn') : null),
      dtypeSwitch(check, dtypes, dtype),
      pager(check, dtype, page, pages, total),
    );
    const facts = h(
      'p',
      { class: 'subtitle check-facts' },
      [data.op ? `op ${data.op}` : null, data.pass ? `pass ${data.pass}` : null, Array.isArray(data.families) && data.families.length ? `shape families: ${data.families.join(', ')}` : null].filter(Boolean).join(' · '),
    );
    const parts = [head, facts, regressionList(data.regressions, check, dtype), bisectionList(d.bisections, check)];
    if (dtype && dtypes.length && !dtypes.includes(dtype)) {
      parts.push(notice('error', `${check} has no dtype '${dtype}'.`, 'Its dtypes: ', dtypes.map((x, i) => [i ? ', ' : '', h('a', { href: url.check(check, x) }, x)])));
      return h('section', { class: 'view view-check' }, parts);
    }
    if (!d.rows.length) {
      parts.push(notice('info', page > 1 ? `There is no page ${page}.` : 'No results for this check yet.', page > 1 ? h('a', { href: url.check(check, dtype) }, 'Go to the newest commits.') : 'They appear as commits are built and their trials finish; this page refreshes by itself.'));
      return h('section', { class: 'view view-check' }, parts);
    }
    parts.push(charts(d, check, dtype));
    parts.push(h('section', { 'aria-labelledby': 'series-h' }, h('h2', { id: 'series-h' }, 'Per commit, newest first'), table(d, check, dtype)));
    if (pages > 1) parts.push(h('div', { class: 'view-foot' }, pager(check, dtype, page, pages, total)));
    return h('section', { class: 'view view-check' }, parts);
  },
};
