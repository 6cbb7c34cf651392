// Drives the dashboard in headless Chromium against a live numwatchd (the one
// web_dashboard.sh starts) with puppeteer-core, and checks what a user does:
// the grid renders, links and cells navigate, back restores the place,
// auto-refresh keeps scroll and focus, arrow keys move between cells, API
// strings are shown as text, nothing is fetched from another host, and a
// 50 commit x 150 column page renders quickly.
//
//   node tests/integration/web_browser.mjs http://127.0.0.1:PORT
//
// Needs puppeteer-core (npm; not a dependency of the project) resolvable from
// NODE_PATH or the working directory, and Chromium (CHROMIUM, default
// /usr/bin/chromium). Exits 77 (skip) when either is missing.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const base = process.argv[2];
if (!base) {
  console.error('usage: web_browser.mjs BASE_URL');
  process.exit(2);
}
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
let puppeteer;
try {
  const require = createRequire(path.join(process.cwd(), 'noop.js'));
  puppeteer = require('puppeteer-core');
} catch {
  console.log('skip: puppeteer-core is not installed (npm install puppeteer-core)');
  process.exit(77);
}
if (!existsSync(chromium)) {
  console.log(`skip: no Chromium at ${chromium}`);
  process.exit(77);
}

const origin = new URL(base).origin;
let failures = 0;
function check(cond, what) {
  if (cond) console.log(`ok: ${what}`);
  else {
    failures++;
    console.log(`FAIL: ${what}`);
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  const foreign = [];
  const errors = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(origin) && !r.url().startsWith('data:')) foreign.push(r.url());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });

  // ---- commits grid
  await page.goto(base + '/', { waitUntil: 'networkidle0' });
  await page.waitForSelector('table.grid tbody tr');
  const grid = await page.evaluate(() => ({
    rows: document.querySelectorAll('table.grid tbody tr').length,
    cols: document.querySelectorAll('table.grid thead tr.h-dtypes th').length,
    cells: document.querySelectorAll('table.grid a.cell').length,
    repo: document.getElementById('repo').textContent,
    title: document.title,
    injected: document.querySelectorAll('main img, main script').length,
    titles: [...document.querySelectorAll('.c-title')].map((e) => e.textContent),
  }));
  check(grid.rows > 0 && grid.cols > 0 && grid.cells === grid.rows * grid.cols, `grid: ${grid.rows} rows x ${grid.cols} columns, one link a cell`);
  check(grid.repo.length > 0 && grid.title.includes(grid.repo), `repository name in header and title: ${grid.repo}`);
  const markup = grid.titles.find((t) => t.includes('<'));
  check(grid.injected === 0 && (markup === undefined || markup.includes('<img')), `API strings are text, not markup${markup ? `: ${markup}` : ''}`);

  // ---- auto-refresh: changed verdicts are patched in place; a changed layout is
  // rendered anew; both keep scroll and focus.
  let served = 0;
  let extraColumn = false;
  await page.setRequestInterception(true);
  page.on('request', async (r) => {
    if (!r.url().includes('/api/v1/commits?')) return r.continue();
    const res = await fetch(r.url());
    const body = JSON.parse(await res.text());
    served++;
    const c0 = body.checks[0];
    body.commits[0].verdicts[`${c0.check}/${c0.dtypes[0]}`] = served % 2 ? 'regressed' : 'flaky';
    if (extraColumn) body.checks.push({ check: 'zz_new.fwd', dtypes: ['f32'], deterministic: true });
    r.respond({ status: res.status, contentType: 'application/json', body: JSON.stringify(body) });
  });
  await page.setViewport({ width: 480, height: 600 }); // narrow: the grid scrolls even with few checks
  await page.evaluate(() => {
    const w = document.querySelector('.grid-wrap');
    w.scrollLeft = 400; // clamped when the grid is narrow
    w.scrollTop = 60; // clamped when the grid is short
    document.querySelector('table.grid').dataset.old = '1';
    document.querySelector('table.grid a.sha').focus();
  });
  const focusedHref = await page.evaluate(() => document.activeElement.getAttribute('href'));
  const before = await page.evaluate(() => [document.querySelector('.grid-wrap').scrollLeft, document.querySelector('.grid-wrap').scrollTop]);
  const probe = () =>
    page.evaluate(() => ({
      left: document.querySelector('.grid-wrap').scrollLeft,
      top: document.querySelector('.grid-wrap').scrollTop,
      focus: document.activeElement && document.activeElement.getAttribute('href'),
      status: document.getElementById('refresh-status').textContent,
      same: document.querySelector('table.grid').dataset.old === '1',
      first: document.querySelector('table.grid a.cell').dataset.v,
      cols: document.querySelectorAll('table.grid thead tr.h-dtypes th').length,
    }));
  await sleep(5600);
  const p1 = await probe();
  await sleep(5000);
  const p2 = await probe();
  check(/^Updated \d\d:\d\d:\d\d$/.test(p2.status), `auto-refresh ran: '${p2.status}'`);
  check(p1.same && p2.same && p1.first !== p2.first && ['regressed', 'flaky'].includes(p1.first), `changed verdicts patched in place (${p1.first} -> ${p2.first})`);
  check(before[0] > 0 && p2.left === before[0] && p2.top === before[1] && p2.focus === focusedHref, `patching keeps scroll (${p2.left}, ${p2.top}) and focus`);
  extraColumn = true;
  await sleep(5200);
  const p3 = await probe();
  check(!p3.same && p3.cols === grid.cols + 1, `a new column renders the grid anew (${p3.cols} columns)`);
  check(p3.left === before[0] && p3.top === before[1], `re-rendering keeps scroll (${p3.left}, ${p3.top})`);
  check(p3.focus === focusedHref, `re-rendering keeps focus (${p3.focus})`);
  await page.setRequestInterception(false);
  page.removeAllListeners('request');
  await page.setViewport({ width: 1400, height: 900 });

  // ---- arrow keys
  await page.keyboard.press('ArrowRight');
  const k1 = await page.evaluate(() => document.activeElement.className);
  await page.keyboard.press('ArrowDown');
  const k2 = await page.evaluate(() => [document.activeElement.dataset.row, document.activeElement.dataset.col]);
  check(k1.includes('cell') && k2[0] === '1' && k2[1] === '1', `arrow keys move between cells (${k1}; row ${k2[0]} col ${k2[1]})`);

  // ---- a cell opens the commit at its check
  await page.goto(base + '/', { waitUntil: 'networkidle0' }); // the real data again
  await page.waitForSelector('table.grid tbody tr');
  const cellHref = await page.evaluate(() => {
    const a = document.querySelector('table.grid a.cell.v-regressed') || document.querySelector('table.grid a.cell:not(.v-pending):not(.v-build_failed)');
    a.scrollIntoView();
    return a.getAttribute('href');
  });
  await page.setViewport({ width: 480, height: 600 }); // so that the grid scrolls
  const placeBefore = await page.evaluate((href) => {
    const a = document.querySelector(`a.cell[href="${CSS.escape(href)}"]`);
    a.scrollIntoView({ block: 'nearest', inline: 'center' });
    a.focus();
    return document.querySelector('.grid-wrap').scrollLeft;
  }, cellHref);
  await page.evaluate((href) => document.querySelector(`a.cell[href="${CSS.escape(href)}"]`).click(), cellHref);
  await page.waitForSelector('.view-commit');
  const cv = await page.evaluate(() => ({
    url: location.pathname + location.search + location.hash,
    h1: document.querySelector('h1').textContent,
    flashed: document.querySelectorAll('.flash').length,
    repro: [...document.querySelectorAll('.seed .copyable code')].map((e) => e.textContent),
  }));
  check(cv.url === cellHref, `cell link opens ${cv.url}`);
  check(cv.flashed === 1, 'the check row named by the fragment is highlighted');
  if (cv.repro.length) check(cv.repro.every((r) => /^\.\/numwatch-runner-\w+ --check \S+ --dtype \S+ --seed \d+$/.test(r)), `repro commands: ${cv.repro[0]}`);

  // ---- back returns to the grid
  await page.goBack();
  await page.waitForSelector('table.grid');
  const placeAfter = await page.evaluate(() => ({
    search: location.search,
    left: document.querySelector('.grid-wrap').scrollLeft,
    focus: document.activeElement && document.activeElement.getAttribute('href'),
  }));
  check(placeAfter.search === '', 'back returns to the grid');
  check(placeBefore > 0 && placeAfter.left === placeBefore && placeAfter.focus === cellHref, `back restores the grid's scroll (${placeAfter.left}) and the focused cell`);
  await page.setViewport({ width: 1400, height: 900 });

  // ---- a row click (outside links) opens the commit
  await page.evaluate(() => document.querySelector('table.grid tbody tr .c-line2').click());
  await page.waitForSelector('.view-commit');
  check(await page.evaluate(() => new URLSearchParams(location.search).get('view') === 'commit'), 'a click on a row opens its commit');

  // ---- health via the nav
  await page.click('#nav a[href="/?view=health"]');
  await page.waitForSelector('.view-health table.slots');
  const hv = await page.evaluate(() => ({
    current: document.querySelector('#nav a[aria-current="page"]').textContent,
    slots: document.querySelectorAll('table.slots tbody tr').length,
  }));
  check(hv.current === 'Health' && hv.slots > 0, `health view: ${hv.slots} slots, nav marks Health`);

  const errorsBefore404 = errors.length;

  // ---- bad and unknown shas (the browser logs the 404s as console errors: expected)
  await page.goto(base + '/?view=commit&sha=xyz', { waitUntil: 'networkidle0' });
  check((await page.$eval('main', (m) => m.textContent)).includes('not a commit id'), 'a malformed sha says so');
  await page.goto(base + '/?view=commit&sha=0123456789abcdef', { waitUntil: 'networkidle0' });
  check((await page.$eval('main', (m) => m.textContent)).includes('Not found'), 'an unknown sha is Not found');
  await page.goto(base + '/?page=999', { waitUntil: 'networkidle0' });
  check((await page.$eval('main', (m) => m.textContent)).includes('There is no page 999'), 'a page past the end says so');

  // ---- 50 commits x 50 checks x 3 dtypes renders quickly (synthetic answer)
  const big = {
    repository: 'synthetic', total: 500, limit: 50, offset: 0,
    checks: Array.from({ length: 50 }, (_, i) => ({ check: `op${String(i).padStart(2, '0')}.${i % 2 ? 'bwd' : 'fwd'}`, dtypes: ['f32', 'f16', 'bf16'], deterministic: i % 9 !== 0 })),
    commits: [],
  };
  const vs = ['clean', 'clean', 'clean', 'clean', 'regressed', 'flaky', 'pending', 'infra_error', 'improved'];
  for (let r = 0; r < 50; r++) {
    const verdicts = {};
    big.checks.forEach((c, i) => c.dtypes.forEach((d, j) => (verdicts[`${c.check}/${d}`] = vs[(r * 7 + i * 3 + j) % vs.length])));
    big.commits.push({ sha: (r.toString(16).padStart(2, '0') + 'ab').repeat(10), title: `commit ${r} <b>bold?</b>`, author: 'A', email: 'a@x', committed_at: new Date(Date.now() - r * 3600e3).toISOString(), position: 500 - r, build: 'ok', verdict: 'regressed', verdicts });
  }
  errors.splice(errorsBefore404);
  const page2 = await browser.newPage();
  await page2.setViewport({ width: 1400, height: 900 });
  await page2.setRequestInterception(true);
  page2.on('request', (r) => {
    if (r.url().includes('/api/v1/commits?')) r.respond({ status: 200, contentType: 'application/json', body: JSON.stringify(big) });
    else r.continue();
  });
  page2.on('pageerror', (e) => errors.push(String(e)));
  await page2.goto(base + '/', { waitUntil: 'networkidle0' });
  await page2.waitForSelector('table.grid tbody tr');
  const perf = await page2.evaluate(async () => {
    const n = document.querySelectorAll('table.grid a.cell').length;
    // Time a full re-render: navigate to the same URL in-app.
    const t0 = performance.now();
    window.dispatchEvent(new CustomEvent('nw:navigate', { detail: '/?page=1' }));
    await new Promise((r) => {
      const obs = new MutationObserver(() => {
        if (document.querySelector('table.grid tbody tr')) {
          obs.disconnect();
          r();
        }
      });
      obs.observe(document.getElementById('main'), { childList: true });
    });
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    const renders = performance.getEntriesByType('measure').filter((m) => m.name === 'nw:render commits');
    return { n, ms: performance.now() - t0, render: renders[renders.length - 1].duration };
  });
  check(perf.n === 50 * 150, `synthetic page: ${perf.n} cells`);
  // Generous: catches a pathological regression, not noise on a busy CI machine (typically 90-200 ms).
  check(perf.render < 1500, `50 x 150 grid built in ${perf.render.toFixed(0)} ms (fetched, built and painted in ${perf.ms.toFixed(0)} ms)`);
  await page2.setViewport({ width: 1400, height: 900 });
  await page2.screenshot({ path: process.env.NW_WEB_SHOT || '/tmp/nw-web-synthetic.png' });

  check(foreign.length === 0, `no request left ${origin}${foreign.length ? ': ' + foreign.join(', ') : ''}`);
  check(errors.length === 0, `no script errors${errors.length ? ': ' + errors.join(' | ') : ''}`);
} finally {
  await browser.close();
}
process.exit(failures ? 1 : 0);
