// Unit tests of the dashboard's pure modules (no DOM needed), run with node:
//   node tests/integration/web_unit.mjs
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const web = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../web');
const f = await import(path.join(web, 'js/format.js'));
const { columns } = await import(path.join(web, 'js/views/commits.js'));
const { chartData: checkData, logSplits } = await import(path.join(web, 'js/views/check.js'));
const { byDevice, fleetIssues, queueDepth } = await import(path.join(web, 'js/views/health.js'));
const { rangeRows } = await import(path.join(web, 'js/views/bisection.js'));
const { resultVerdict } = await import(path.join(web, 'js/views/commit.js'));
const { pointVerdict } = await import(path.join(web, 'js/views/check.js'));
const { isRegressionStateFilter, STATE_FILTERS } = await import(path.join(web, 'js/views/regressions.js'));
const { rateBands } = await import(path.join(web, 'js/views/regression.js'));

let n = 0;
function test(name, fn) {
  fn();
  n++;
  console.log(`ok: ${name}`);
}

test('relTime', () => {
  const now = Date.parse('2026-03-01T12:00:00Z');
  assert.equal(f.relTime('2026-03-01T12:00:00+00:00', now), 'just now');
  assert.equal(f.relTime('2026-03-01T11:59:18Z', now), '42 s ago');
  assert.equal(f.relTime('2026-03-01T11:55:00.123456+00:00', now), '5 min ago');
  assert.equal(f.relTime('2026-03-01T09:00:00Z', now), '3 h ago');
  assert.equal(f.relTime('2026-02-27T12:00:00Z', now), '2 d ago');
  assert.match(f.relTime('2025-01-01T00:00:00Z', now), /^202[45]-\d\d-\d\d$/);
  assert.equal(f.relTime(null, now), '—');
  assert.equal(f.relTime('garbage', now), '—');
});

test('number formats', () => {
  assert.equal(f.fmtRatio(null), '—');
  assert.equal(f.fmtRatio(0.25), '0.250');
  assert.equal(f.fmtRatio(4.72), '4.72');
  assert.equal(f.fmtRatio(123.4), '123');
  assert.equal(f.fmtRatio(1e308), '1.00e+308');
  assert.equal(f.fmtRatio(0.0001), '1.00e-4');
  assert.equal(f.fmtNum(0.0131), '0.0131');
  assert.equal(f.fmtNum(0.001), '1.00e-3');
  assert.equal(f.fmtInt(12345), '12,345');
  assert.equal(f.fmtDurationMs(205), '205 ms');
  assert.equal(f.fmtDurationMs(95000), '1 min 35 s');
  assert.equal(f.fmtSeconds(7384), '2 h 3 min');
  assert.equal(f.fmtShape([2, 1025]), '[2, 1025]');
});

test('verdicts', () => {
  assert.equal(f.verdictClass('regressed'), 'v-regressed');
  assert.equal(f.verdictClass('build_failed'), 'v-build_failed');
  assert.equal(f.verdictClass(null), 'v-none');
  // An unknown verdict never becomes a class name of its own.
  assert.equal(f.verdictClass('x" onmouseover="alert(1)'), 'v-unknown');
  assert.equal(f.verdictInfo('brand_new').label, 'brand_new');
  const c = { verdict: 'clean', build: 'ok', verdicts: { 'a.fwd/f32': 'flaky' } };
  assert.equal(f.cellVerdict(c, 'a.fwd/f32'), 'flaky');
  assert.equal(f.cellVerdict(c, 'b.fwd/f32'), 'none');
  assert.equal(f.cellVerdict({ verdict: 'build_failed', build: 'failed', verdicts: {} }, 'a.fwd/f32'), 'build_failed');
  assert.equal(f.cellVerdict({ verdict: 'pending', build: null, verdicts: {} }, 'a.fwd/f32'), 'pending');
  assert.equal(f.cellVerdict({ verdict: 'pending', build: 'ok', verdicts: {} }, 'a.fwd/f32'), 'pending');
});

test('urls', () => {
  const sha = 'aa98845643a9a1396c025200925d1d262d7fe474';
  assert.equal(f.url.commits(), '/');
  assert.equal(f.url.commits(1), '/');
  assert.equal(f.url.commits(3), '/?page=3');
  assert.equal(f.url.commit(sha), `/?view=commit&sha=${sha}`);
  assert.equal(f.url.commit(sha, 'softmax.fwd', 'f16'), `/?view=commit&sha=${sha}#softmax.fwd/f16`);
  assert.equal(f.url.commit(sha, 'a b', 'f16'), `/?view=commit&sha=${sha}#a%20b/f16`);
  assert.equal(f.url.commit(sha, null, null, { show: 'problems' }), `/?view=commit&sha=${sha}&show=problems`);
  assert.equal(f.url.health(), '/?view=health');
  assert.equal(f.url.buildLog(sha), `/api/v1/commits/${sha}/build-log`);
  assert.ok(f.isSha('abcd') && f.isSha(sha) && !f.isSha('abc') && !f.isSha('ABCD') && !f.isSha('javascript:x'));
});

test('query parsing', () => {
  assert.equal(f.parsePage(null), 1);
  assert.equal(f.parsePage('2'), 2);
  assert.equal(f.parsePage('0'), 1);
  assert.equal(f.parsePage('-3'), 1);
  assert.equal(f.parsePage('2x'), 1);
  assert.equal(f.parsePage('99999999999'), 1);
  assert.deepEqual(f.splitQueueKey('trials_running'), ['trials', 'running']);
  assert.deepEqual(f.splitQueueKey('bisect_probe_queued'), ['bisect_probe', 'queued']);
});

test('grid columns', () => {
  const cols = columns([
    { check: 'softmax.fwd', dtypes: ['f32', 'f16'] },
    { check: 'msda.bwd', dtypes: ['f32'] },
    { check: 'odd', dtypes: [] },
  ]);
  assert.deepEqual(cols.map((c) => c.key), ['softmax.fwd/f32', 'softmax.fwd/f16', 'msda.bwd/f32', 'odd']);
  assert.deepEqual(columns(undefined), []);
});

test('new view URLs and ids', () => {
  assert.equal(f.url.checks(), '/?view=checks');
  assert.equal(f.url.check('softmax.fwd'), '/?view=check&check=softmax.fwd');
  assert.equal(f.url.check('softmax.fwd', 'bf16'), '/?view=check&check=softmax.fwd&dtype=bf16');
  assert.equal(f.url.check('a+b:c', 'f16', { page: 3 }), '/?view=check&check=a%2Bb%3Ac&dtype=f16&page=3');
  assert.equal(f.url.check('x', '', { page: 1 }), '/?view=check&check=x');
  assert.equal(f.url.bisections(), '/?view=bisections');
  assert.equal(f.url.bisections(2), '/?view=bisections&page=2');
  assert.equal(f.url.bisection(7), '/?view=bisection&id=7');
  assert.ok(f.isName('softmax.fwd') && f.isName('a+b:c_d-e') && !f.isName('') && !f.isName('a b') && !f.isName('x'.repeat(64)) && !f.isName('<x>'));
  assert.ok(f.isBisectionId('7') && f.isBisectionId(12) && !f.isBisectionId('0') && !f.isBisectionId('-1') && !f.isBisectionId('1x') && !f.isBisectionId('1'.repeat(19)));
});

test('percent, outcomes, flags', () => {
  assert.equal(f.fmtPercent(null), '—');
  assert.equal(f.fmtPercent(0), '0%');
  assert.equal(f.fmtPercent(1), '100%');
  assert.equal(f.fmtPercent(0.995), '99.5%');
  assert.equal(f.fmtPercent(0.99999), '>99.9%');
  assert.equal(f.fmtPercent(0.25), '25%');
  assert.equal(f.fmtPercent(0.015625, 2), '1.56%');
  assert.equal(f.fmtPercent(0.0042), '0.42%');
  assert.equal(f.fmtPercent(1e-9), '<0.01%');
  assert.equal(f.outcomeInfo('culprit', 'done').tone, 'bad');
  assert.equal(f.outcomeInfo('no_culprit', 'done').label, 'no culprit (a flake)');
  assert.equal(f.outcomeInfo(null, 'running').label, 'searching');
  assert.equal(f.outcomeInfo(null, 'confirming').label, 'confirming');
  assert.equal(f.outcomeInfo('new_thing', 'done').label, 'new thing');
  assert.deepEqual(f.flagWords(0), []);
  assert.deepEqual(f.flagWords(3), ['does not build', 'same binary as its parent']);
});

test('long bisection ranges fold', () => {
  const rows = Array.from({ length: 1000 }, (_, i) => ({ i }));
  const short = f.foldRange(rows.slice(0, 10), () => false, { max: 300 });
  assert.equal(short.length, 10);
  const out = f.foldRange(rows, (r) => r.i === 0 || r.i === 500 || r.i === 999, { max: 300 });
  assert.deepEqual(out.map((x) => (x.gap ? `gap${x.gap}` : x.row.i)), [0, 'gap499', 500, 'gap498', 999]);
  assert.deepEqual(f.foldRange(rows, (r) => r.i === 10).map((x) => (x.gap ? `gap${x.gap}` : x.row.i)), ['gap10', 10, 'gap989']);
});

test('check chart data', () => {
  const series = [
    { sha: 'b'.repeat(40), position: 2, dtype: 'f32', verdict: 'regressed', worst_ratio: 3.5, median_ratio: 0.2, failure_rate: 0.25 },
    { sha: 'a'.repeat(40), position: 1, dtype: 'f32', verdict: 'clean', worst_ratio: 0, median_ratio: null, failure_rate: 0 },
    { sha: 'a'.repeat(40), position: 1, dtype: 'bf16', verdict: 'clean', worst_ratio: 0.5, median_ratio: 0.1, failure_rate: 0 },
    { sha: 'c'.repeat(40), position: 3, dtype: 'f32', verdict: 'build_failed', worst_ratio: null, median_ratio: null, failure_rate: null },
  ];
  const bis = [
    { id: 4, dtype: 'f32', bad: 'b'.repeat(40), culprit: 'b'.repeat(40), outcome: 'culprit' },
    { id: 5, dtype: 'bf16', bad: 'a'.repeat(40), culprit: 'a'.repeat(40), outcome: 'culprit' },
    { id: 6, dtype: 'f32', bad: 'b'.repeat(40), culprit: null, outcome: null },
  ];
  const d = checkData(series, bis, 'f32');
  assert.deepEqual(d.xs, [1, 2, 3]);
  assert.deepEqual(d.worst, [null, 3.5, null]); // 0 cannot be drawn on a log scale
  assert.deepEqual(d.rate, [0, 25, null]);
  assert.deepEqual(d.regressed, [null, 3.5, null]);
  assert.deepEqual(d.regressedRate, [null, 25, null]);
  assert.deepEqual(d.culprits.map((c) => [c.x, c.id]), [[2, 4]]);
  assert.equal(d.bisections.length, 2);
  assert.equal(d.nRegressed, 1);
  assert.deepEqual(logSplits([0.1, 0.2, 0.3, 0.5, 1, 2, 3]), [0.1, 0.2, null, 0.5, 1, 2, null]);
  assert.deepEqual(logSplits([0.01, 0.02, 0.1, 1, 10, 20, 100, 1000]), [0.01, null, 0.1, 1, 10, null, 100, 1000]);
});

test('health: devices and queue depth', () => {
  const slots = [
    { name: 'host', gpu: -1, state: 'idle', runner_pid: 5, restarts: 1, trials: 3 },
    { name: 'gpu1', gpu: 1, state: 'running', runner_pid: 7, restarts: 0, trials: 9 },
    { name: 'gpu0', gpu: 0, state: 'idle', runner_pid: 0, restarts: 0, trials: 2 },
    { name: 'gpu0b', gpu: 0, state: 'idle', runner_pid: 8, restarts: 0, trials: 2 },
  ];
  assert.deepEqual(byDevice(slots).map((d) => [d.gpu, d.slots.length]), [[0, 2], [1, 1], [-1, 1]]);
  assert.deepEqual(queueDepth({ trials_queued: 12, trials_running: 1, probe_queued: 3, build_done: 2 }), { queued: 15, running: 1, other: 2 });
  assert.deepEqual(queueDepth(undefined), { queued: 0, running: 0, other: 0 });
});

test('health: daemons needing attention', () => {
  const daemons = [
    { name: 'a', alive: true, state: 'running', config_differs_from: ['b'], schema_differs_from: [], schema_version: 40 },
    { name: 'b', alive: true, state: 'running', config_differs_from: ['a'], schema_differs_from: ['c'], schema_version: 40 },
    { name: 'c', alive: false, state: 'refused', note: 'schema newer', config_differs_from: [], schema_differs_from: [] },
    { name: 'd', alive: false, state: 'running', config_differs_from: [], schema_differs_from: [] },
    { name: 'e', alive: false, state: 'stopped', config_differs_from: ['a'], schema_differs_from: [] },
  ];
  assert.deepEqual(fleetIssues(daemons).map((i) => i.name + ': ' + i.what.split(':')[0].split(' from')[0]), [
    'a: settings differ',
    'b: settings differ',
    'b: schema 40 differs',
    'c: refuses to write',
    'd: lost',
  ]);
  assert.deepEqual(fleetIssues(undefined), []);
});

test('bisection range rows', () => {
  const sha = (c) => c.repeat(40);
  const rows = rangeRows({
    range: [
      { sha: sha('1'), build: 'ok', runner_hash: 'h1' },
      { sha: sha('2'), build: 'ok', runner_hash: 'h1' },
      { sha: sha('3'), build: 'failed', runner_hash: null },
      { sha: sha('4'), build: 'ok', runner_hash: 'h4' },
    ],
    posterior: { commits: [{ sha: sha('4'), p: 0.9, flags: 0 }] },
    probes: [
      { commit: sha('4'), trials: 8, failures: 2 },
      { commit: sha('4'), trials: 4, failures: 1 },
      { commit: sha('0'), trials: 9, failures: 0 },
    ],
  });
  assert.deepEqual(rows.map((r) => r.flags), [0, 2, 1, 0]); // derived where the posterior has none
  assert.deepEqual(rows.map((r) => r.p), [null, null, null, 0.9]);
  assert.deepEqual([rows[3].probes, rows[3].trials, rows[3].failures], [2, 12, 3]);
});

test('regressions: new, open, fixed cells and their tooltips', () => {
  const c = {
    verdict: 'regressed',
    build: 'ok',
    verdicts: { 'a/f32': 'regressed', 'b/f32': 'regressed', 'c/f32': 'improved', 'd/f32': 'flaky', 'e/f32': 'check_changed', 'g/f32': 'regressed' },
    regressions: { 'a/f32': { id: 3, new: true }, 'b/f32': { id: 2, new: false }, 'c/f32': { id: 1, new: false }, 'g/f32': { id: 'x', new: false } },
    details: {
      'd/f32': { trials: 64, failures: 8, failing_since: 'ab'.repeat(20), changed_seeds: 0 },
      'e/f32': { trials: 16, failures: 0, failing_since: null, changed_seeds: 1 },
    },
  };
  assert.equal(f.cellVerdict(c, 'a/f32'), 'regressed');
  assert.equal(f.cellVerdict(c, 'b/f32'), 'open_regression');
  assert.equal(f.cellVerdict(c, 'c/f32'), 'improved');
  assert.equal(f.cellVerdict(c, 'e/f32'), 'check_changed');
  // A malformed regression entry (an older or odd daemon) leaves the verdict as it is.
  assert.equal(f.cellVerdict(c, 'g/f32'), 'regressed');
  assert.equal(f.cellVerdict({ verdicts: { 'a/f32': 'regressed' } }, 'a/f32'), 'regressed');
  assert.equal(f.cellNote(c, 'a/f32'), 'regression #3, new at this commit');
  assert.equal(f.cellNote(c, 'b/f32'), 'still shows regression #2 (open, brought in earlier)');
  assert.equal(f.cellNote(c, 'c/f32'), 'fixes regression #1');
  assert.equal(f.cellNote(c, 'd/f32'), '8/64 failing (12.5%); failing since abababab, where the check was introduced');
  assert.equal(f.cellNote(c, 'e/f32'), '0/16 failing (0%); 1 seed with changed inputs');
  assert.equal(f.cellNote(c, 'zz/f32'), '');
  assert.equal(f.cellNote({}, 'a/f32'), '');
  // Both kinds of regression, and a changed check, have their own class, label and glyph.
  const infos = ['regressed', 'open_regression', 'check_changed'].map(f.verdictInfo);
  assert.deepEqual(infos.map((i) => i.label), ['regressed', 'open regression', 'check changed']);
  assert.equal(new Set(infos.map((i) => i.glyph)).size, 3);
  assert.equal(f.verdictClass('open_regression'), 'v-open_regression');
  assert.ok(f.ATTENTION.has('open_regression') && f.ATTENTION.has('check_changed'));
  const legend = f.VERDICTS.map((v) => v.key);
  assert.ok(legend.indexOf('open_regression') === legend.indexOf('regressed') + 1);
});

test('regressions: urls, states, rates', () => {
  assert.equal(f.url.regressions(), '/?view=regressions');
  assert.equal(f.url.regressions({ state: 'active' }), '/?view=regressions&state=active');
  assert.equal(f.url.regressions({ state: '', check: 'a+b', dtype: 'f32', page: 2 }), '/?view=regressions&check=a%2Bb&dtype=f32&page=2');
  assert.equal(f.url.regression(12), '/?view=regression&id=12');
  assert.ok(f.isId('12') && !f.isId('0') && !f.isId('%ff') && !f.isId('9'.repeat(19)));
  assert.equal(f.regressionStateInfo('culprit').label, 'culprit found');
  assert.equal(f.regressionStateInfo('fixed').tone, 'good');
  assert.equal(f.regressionStateInfo('brand_new').label, 'brand new');
  assert.deepEqual(['open', 'bisecting', 'culprit', 'no_culprit', 'check_changed', 'fixed', 'withdrawn'].map(f.regressionActive), [true, true, true, true, false, false, false]);
  assert.ok(STATE_FILTERS.every((s) => isRegressionStateFilter(s.state)));
  assert.ok(isRegressionStateFilter('closed') && !isRegressionStateFilter('nope') && !isRegressionStateFilter(null));
  assert.equal(f.fmtRate({ trials: 64, failures: 3, rate: 0.046875, wilson95: [0.0161, 0.1289] }), '3/64 failing (4.7%, 95% CI 1.6%–12.9%)');
  assert.equal(f.fmtRate({ trials: 16, failures: 0 }), '0/16 failing (0%)');
  assert.equal(f.fmtRate({}), '—');
  assert.equal(f.fmtRate(null), '—');
  const b = rateBands({ trials: 100, failures: 0, rate: 0, wilson95: [0, 0.037] }, { trials: 16, failures: 4, rate: 0.25, wilson95: [0.1, 0.5] });
  assert.ok(Math.abs(b.scale - 0.575) < 1e-9);
  assert.ok(b.after.to < 1 && b.after.from < b.after.at && b.after.at < b.after.to);
  assert.equal(b.before.at, 0);
  assert.equal(rateBands({}, null).before, null);
  assert.equal(rateBands({}, null).scale, 0.01);
});

test('regressions: commit results and check series', () => {
  assert.equal(resultVerdict({ verdict: 'regressed', regression: { id: 1, new: false } }), 'open_regression');
  assert.equal(resultVerdict({ verdict: 'regressed', regression: { id: 1, new: true } }), 'regressed');
  assert.equal(resultVerdict({ verdict: 'regressed', regression: null }), 'regressed');
  assert.equal(resultVerdict({ verdict: 'flaky' }), 'flaky');
  assert.equal(pointVerdict({ verdict: 'regressed', regression_new: false }), 'open_regression');
  assert.equal(pointVerdict({ verdict: 'regressed', regression_new: true }), 'regressed');
  // Only the commit a regression is new at is ringed on the chart, not those that still show it.
  const series = [1, 2, 3].map((p) => ({ sha: String(p).repeat(40), position: p, dtype: 'f32', verdict: p === 1 ? 'clean' : 'regressed', regression: p > 1 ? 9 : null, regression_new: p === 2, worst_ratio: p === 1 ? 0.5 : 3, failure_rate: p === 1 ? 0 : 0.25 }));
  const d = checkData(series, [], 'f32');
  assert.deepEqual(d.regressed, [null, 3, null]);
  assert.equal(d.nRegressed, 1);
});

console.log(`${n} web unit tests passed`);
