// Unit tests of the dashboard's pure modules (no DOM needed), run with node:
//   node tests/integration/web_unit.mjs
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const web = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../web');
const f = await import(path.join(web, 'js/format.js'));
const { columns } = await import(path.join(web, 'js/views/commits.js'));

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

console.log(`${n} web unit tests passed`);
