// Drives the dashboard in Debian's Chromium with playwright-core (from
// web/node_modules) against a live numwatchd that has judged the demo history
// and bisected its softmax regression (browser.sh sets that up):
//
//   grid -> (click) the regressed commit -> a failing seed and its repro command
//        -> (click) the bisection -> the culprit, highlighted, with its confidence
//   bisections list -> (click) a bisection
//   grid column header -> (click) a check page -> the uPlot canvas, regressions
//        and culprits marked
//   health page: GPUs/runners, queue depth, database
//
// Screenshots of each step go to ARTEFACTS_DIR (their paths are printed).
//
//   node browser_test.mjs BASE_URL REGRESSED_SHA ARTEFACTS_DIR
//
// Environment: NW_WEB_DIR (web/, whose node_modules holds playwright-core),
// CHROMIUM (default /usr/bin/chromium). A missing module or browser is a
// failure (exit 1), never a skip.
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const [base, bugSha, outDir] = process.argv.slice(2);
if (!base || !/^[0-9a-f]{40}$/.test(bugSha || '') || !outDir) {
  console.error('usage: browser_test.mjs BASE_URL REGRESSED_SHA ARTEFACTS_DIR');
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const webDir = process.env.NW_WEB_DIR || path.resolve(here, '../../web');
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';

let chromiumApi;
try {
  const require = createRequire(path.join(webDir, 'package.json'));
  ({ chromium: chromiumApi } = require('playwright-core'));
} catch (e) {
  console.error(`FAIL: cannot load playwright-core from ${webDir}/node_modules (${e.message}); run 'npm ci' in ${webDir}`);
  process.exit(1);
}
if (!existsSync(chromium)) {
  console.error(`FAIL: no Chromium at ${chromium}; install Debian's chromium`);
  process.exit(1);
}
mkdirSync(outDir, { recursive: true });

const origin = new URL(base).origin;
const t0 = Date.now();
let failures = 0;
function check(cond, what) {
  if (cond) console.log(`ok: ${what}`);
  else {
    failures++;
    console.log(`FAIL: ${what}`);
  }
  return cond;
}
const shots = [];
async function shot(page, name, opts = {}) {
  const file = path.join(outDir, `${String(shots.length + 1).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file, fullPage: opts.fullPage !== false });
  shots.push(file);
  console.log(`screenshot: ${file}`);
}
/** Waits for the app to have rendered its view (no "Loading…", not busy). */
async function settled(page) {
  await page.waitForFunction(() => document.querySelector('#main .view') && !document.querySelector('#main[aria-busy="true"]'), null, { timeout: 15000 });
}
function search(page) {
  return new URL(page.url()).searchParams;
}

/** Made-up API answers at the scale the dashboard must stay quick at. */
function synthetic() {
  const hex = (n) => ((n * 2654435761) >>> 0).toString(16).padStart(8, '0') + n.toString(16).padStart(32, '0');
  const checks = [];
  for (let i = 0; i < 50; i++) checks.push({ check: `op${String(i).padStart(2, '0')}.fwd`, dtypes: ['f32', 'f16', 'bf16'], deterministic: i % 7 !== 0 });
  const verdicts = ['clean', 'clean', 'clean', 'clean', 'flaky', 'regressed', 'pending', 'improved'];
  const commits = [];
  for (let j = 0; j < 50; j++) {
    const pos = 10000 - 4950 - j - 1;
    const v = {};
    checks.forEach((c, i) => c.dtypes.forEach((d, k) => (v[`${c.check}/${d}`] = verdicts[(i * 3 + k + j) % verdicts.length])));
    commits.push({ sha: hex(pos + 1), title: `change ${pos}`, author: 'Dev', email: 'dev@example.com', committed_at: '2026-01-01T00:00:00+00:00', position: pos, build: 'ok', verdict: 'clean', verdicts: v });
  }
  const series = [];
  for (let p = 9800; p < 10000; p++) {
    const bad = p === 9900;
    series.push({ sha: hex(p + 1), title: `change ${p}`, position: p, committed_at: '2026-01-01T00:00:00+00:00', dtype: 'bf16', verdict: bad ? 'regressed' : 'clean', trials: 64, failures: bad ? 5 : 0, worst_ratio: bad ? 12.5 : 0.2 + (p % 10) / 50, failure_rate: bad ? 5 / 64 : 0, median_ratio: 0.1 });
  }
  const range = [];
  const post = [];
  for (let p = 0; p < 10000; p++) {
    range.push({ sha: hex(p + 1), title: `change ${p}`, author: 'Dev', position: p, build: p % 997 ? 'ok' : 'failed', runner_hash: hex(p).replace(/^0/, 'a') });
    post.push({ sha: hex(p + 1), p: p === 7000 ? 0.97 : p > 6990 && p < 7010 ? 0.001 : 0.00000003, flags: p % 997 ? 0 : 1 });
  }
  return {
    commits: { repository: 'synthetic', total: 10000, limit: 50, offset: 4950, checks, commits },
    check: { check: 'nw.synthetic', op: 'synthetic', pass: 'fwd', dtypes: ['f32', 'f16', 'bf16'], families: ['aligned'], deterministic: true, total: 10000, limit: 200, offset: 0, series, bisections: [{ id: 9, dtype: 'bf16', bad: hex(9901), culprit: hex(9901), outcome: 'culprit', state: 'done', confidence: 0.99 }] },
    bisection: {
      id: 424242, check: 'nw.synthetic', dtype: 'bf16', good: hex(0), bad: hex(10000), state: 'done', outcome: 'culprit', culprit: hex(7001), culprit_title: 'change 7000', culprit_author: 'Dev', confidence: 0.97, failing_seeds: [3], requested_by: 'auto', created_at: '2026-01-01T00:00:00+00:00', finished_at: '2026-01-01T00:10:00+00:00',
      posterior: { commits: post, none: 0.01, status: 'culprit', trials: 900, withdrawals: 0 },
      log: [{ msg: 'made up', at: 1767225600 }],
      range,
      probes: [{ id: 1, commit: hex(7001), round: 1, purpose: 'search', seeds: 8, trials: 8, failures: 3, created_at: '2026-01-01T00:00:00+00:00', finished_at: '2026-01-01T00:01:00+00:00' }],
    },
  };
}

const browser = await chromiumApi.launch({
  executablePath: chromium,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const foreign = [];
const errors = [];
const failedRequests = [];
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  page.on('request', (r) => {
    if (!r.url().startsWith(origin) && !r.url().startsWith('data:')) foreign.push(r.url());
  });
  page.on('requestfailed', (r) => {
    if (!/ERR_ABORTED/.test(r.failure()?.errorText || '')) failedRequests.push(`${r.url()} ${r.failure()?.errorText}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) failedRequests.push(`${r.url()} ${r.status()}`);
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`console: ${m.text()}`);
  });

  // ---- 1. the grid, then click through to the regressed commit
  await page.goto(`${base}/`);
  await settled(page);
  await page.locator('table.grid a.cell.v-regressed').first().waitFor();
  const nRegressed = await page.locator('table.grid a.cell.v-regressed').count();
  check(nRegressed > 0, `grid shows ${nRegressed} regressed cells`);
  await shot(page, 'grid');
  const row = page.locator(`table.grid tbody tr[data-href*="${bugSha}"]`);
  check((await row.count()) === 1, 'the regressed commit has a row in the grid');
  await row.locator('a.sha').click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'commit');
  await settled(page);
  check(search(page).get('sha') === bugSha, 'clicking the row\u2019s sha opens the regressed commit\u2019s page');
  await page.locator('.head-verdict .badge.v-regressed').waitFor();
  check(true, 'the commit page says regressed');
  await shot(page, 'commit-page', { fullPage: false });

  // ---- 2. a failing seed and its repro command
  const seed = page.locator('section.seeds article.seed').first();
  await seed.waitFor();
  const seedTitle = (await seed.locator('h4').textContent()).trim();
  const repro = (await seed.locator('.copyable code').first().textContent()).trim();
  check(/^Seed \d+$/.test(seedTitle), `failing seed shown: ${seedTitle}`);
  check(/^\.\/numwatch-runner-(host|cuda) --check softmax\.(fwd|bwd) --dtype \S+ --seed \d+$/.test(repro), `repro command shown: ${repro}`);
  check(repro.endsWith(`--seed ${seedTitle.replace('Seed ', '')}`), 'the repro command replays that seed');
  const shape = (await seed.locator('.seed-meta code').textContent()).trim();
  check(/^\[\d+(, \d+)*\]$/.test(shape), `the seed\u2019s shape is shown: ${shape}`);
  await seed.scrollIntoViewIfNeeded();
  await shot(page, 'commit-failing-seed', { fullPage: false });

  // ---- 3. the bisection, from the commit page
  const here = page.locator('section.bisections-here');
  check(await here.isVisible(), 'the commit page lists the bisections that blame it');
  check(/Culprit of/.test(await here.locator('h2').textContent()), 'the commit page says it is a culprit');
  const link = here.locator('a.bisection-link').first();
  const linkText = (await link.textContent()).trim();
  await link.click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'bisection');
  await settled(page);
  const bisId = search(page).get('id');
  check(linkText === `Bisection #${bisId}`, `clicking '${linkText}' opens /?view=bisection&id=${bisId}`);
  const outcome = page.locator('#outcome');
  await outcome.waitFor();
  const culpritLink = outcome.locator('a.culprit-sha');
  check((await culpritLink.count()) === 1, 'the bisection names a culprit');
  check((await culpritLink.getAttribute('title')) === bugSha, 'the culprit is the regressed commit');
  const conf = (await outcome.locator('.confidence strong').textContent()).trim();
  check(/%$/.test(conf), `the culprit\u2019s confidence is shown: ${conf}`);
  check((await page.locator('table.range tr.culprit-row').count()) === 1, 'the culprit is highlighted in the range');
  check((await page.locator('table.range .pbar[role="meter"]').count()) >= 1, 'the range has a probability bar per commit');
  check((await page.locator('table.probes tbody tr').count()) >= 1, 'the probes are listed');
  check((await page.locator('ol.bisect-log li').count()) >= 1, 'the log is shown');
  const fact = async (name) => ((await page.locator('dl.facts div.fact', { has: page.locator('dt', { hasText: name }) }).locator('dd').textContent()) || '').trim();
  const rate = await fact('Failure rate');
  check(/^\d+(\.\d+)?% of fresh seeds at the culprit \(estimated\)$/.test(rate), `the culprit\u2019s failure rate is shown: ${rate}`);
  const flake = await fact('Flake rate assumed');
  check(/^[<>]?\d+(\.\d+)?%/.test(flake), `the flake rate the bisection assumed is shown: ${flake}`);
  await shot(page, 'bisection');

  // ---- 4. the bisections list, and back to a bisection by clicking
  await page.locator('#nav a', { hasText: 'Bisections' }).click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'bisections');
  await settled(page);
  const nList = await page.locator('table.bisections tbody tr').count();
  check(nList >= 1, `the bisections list has ${nList} rows`);
  check((await page.locator('table.bisections tbody tr.has-culprit a.culprit-sha').count()) >= 1, 'the list shows culprits');
  await shot(page, 'bisections');
  await page.locator('table.bisections a.bisection-link').first().click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'bisection');
  await settled(page);
  check(/^Bisection #\d+/.test((await page.locator('h1').textContent()).trim()), 'a bisection opens from the list');
  await page.goBack();
  await page.waitForURL((u) => u.searchParams.get('view') === 'bisections');
  await settled(page);
  check(true, 'back returns to the list');

  // ---- 5. a check page, from the grid's column header
  await page.goto(`${base}/`);
  await settled(page);
  const header = page.locator('table.grid th.dtype a.dtype-link[href*="check=softmax.fwd"]').first();
  const headerHref = await header.getAttribute('href');
  await header.click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'check');
  await settled(page);
  check(search(page).get('check') === 'softmax.fwd' && headerHref === `/?view=check&check=softmax.fwd&dtype=${search(page).get('dtype')}`, `the grid\u2019s column header opens ${headerHref}`);
  await page.locator('#chart-ratio[data-state="ready"] canvas').waitFor();
  await page.locator('#chart-rate[data-state="ready"] canvas').waitFor();
  const canvas = await page.locator('#chart-ratio canvas').boundingBox();
  check(canvas && canvas.width > 300 && canvas.height > 100, `the uPlot canvas is drawn (${canvas ? `${Math.round(canvas.width)}x${Math.round(canvas.height)}` : 'none'})`);
  check((await page.locator('#chart-ratio .uplot .u-legend').count()) === 1, 'the chart has uPlot\u2019s legend');
  check((await page.locator('table.check-series tr.culprit-row').count()) >= 1, 'the table marks the culprit');
  check((await page.locator('table.check-series .badge.v-regressed').count()) >= 1, 'the table shows the regression');
  // Point at the regressed commit on the chart: the readout names it.
  const xs = await page.evaluate(() => [...document.querySelectorAll('table.check-series tbody tr')].map((tr) => tr.dataset.sha));
  if (xs.length) {
    const box = await page.locator('#chart-ratio .u-over').boundingBox();
    const i = xs.length - 1 - xs.indexOf(bugSha); // the table is newest first, the chart oldest first
    const x = box.x + (box.width * i) / Math.max(1, xs.length - 1);
    await page.mouse.move(Math.min(box.x + box.width - 1, Math.max(box.x + 1, x)), box.y + box.height / 2);
    await page.waitForTimeout(200);
    const readout = (await page.locator('.chart-readout').textContent()) || '';
    check(readout.includes(bugSha.slice(0, 8)), `pointing at the chart names the commit (${readout.trim().slice(0, 60)}…)`);
  }
  await page.locator('.view-head').scrollIntoViewIfNeeded();
  await shot(page, 'check-page');

  // ---- 6. health: GPUs/runners, queue depth, database
  await page.locator('#nav a', { hasText: 'Health' }).click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'health');
  await settled(page);
  const cards = await page.locator('.card .card-title').allTextContents();
  for (const t of ['Database', 'GPUs', 'Runners', 'Queue depth']) check(cards.some((c) => c.trim().toLowerCase() === t.toLowerCase()), `health shows ${t}`);
  check((await page.locator('table.devices tbody tr').count()) >= 1, 'health lists devices and runners');
  await shot(page, 'health');

  // ---- 7. stays quick at scale: 10,000 commits and 50 checks x 3 dtypes (answers made up here)
  const big = synthetic();
  await page.route(/\/api\/v1\/commits\?limit=50&offset=4950$/, (r) => r.fulfill({ json: big.commits }));
  await page.route(/\/api\/v1\/checks\/nw\.synthetic\?/, (r) => r.fulfill({ json: big.check }));
  await page.route(/\/api\/v1\/bisections\/424242$/, (r) => r.fulfill({ json: big.bisection }));
  const timed = async (u, ready, what, maxMs) => {
    await page.goto(`${base}${u}`);
    await settled(page);
    await page.locator(ready).first().waitFor();
    const ms = await page.evaluate(() => Math.max(0, ...performance.getEntriesByType('measure').filter((m) => m.name.startsWith('nw:render')).map((m) => m.duration)));
    check(ms < maxMs, `${what} renders in ${ms.toFixed(0)} ms (< ${maxMs} ms)`);
  };
  await timed('/?page=100', 'table.grid a.cell', 'page 100 of 10,000 commits x 150 check columns', 1500);
  check((await page.locator('table.grid a.cell').count()) === 50 * 150, 'the grid page has 50 x 150 cells');
  await timed('/?view=check&check=nw.synthetic&dtype=bf16', '#chart-ratio[data-state="ready"] canvas', 'a check page of 200 commits (of 10,000)', 1500);
  await timed('/?view=bisection&id=424242', 'table.range tr.culprit-row', 'a bisection over 10,000 commits (folded)', 1500);
  const gap = await page.locator('table.range tr.gap-row').count();
  check(gap >= 1 && (await page.locator('table.range tbody tr').count()) < 100, `the long range is folded (${gap} folded runs)`);
  await shot(page, 'bisection-10000-commits', { fullPage: false });
  await page.unrouteAll();

  check(!foreign.length, `nothing fetched from another host${foreign.length ? `: ${foreign.join(', ')}` : ''}`);
  check(!errors.length, `no script errors${errors.length ? `: ${errors.join(' | ')}` : ''}`);
  check(!failedRequests.length, `no failed requests${failedRequests.length ? `: ${failedRequests.join(', ')}` : ''}`);
} catch (e) {
  failures++;
  console.log(`FAIL: ${e && e.stack ? e.stack : e}`);
  try {
    const pages = browser.contexts().flatMap((c) => c.pages());
    if (pages.length) await shot(pages[0], 'failure');
  } catch {
    /* no screenshot */
  }
} finally {
  await browser.close();
}
console.log(`${failures ? 'FAIL' : 'ok'}: browser test, ${shots.length} screenshots, ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failures ? 1 : 0);
