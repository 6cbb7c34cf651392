// Drives the dashboard in Debian's Chromium with playwright-core (from
// web/node_modules) against a live numwatchd whose history has one regression
// of fake.fwd f32: new at CULPRIT, still shown (open) by the commits after it
// up to FIX, which fixed it; bisected once, with its culprit mail and the
// follow-up in one thread (browser_regression.sh sets that up):
//
//   grid: the new regression's cell and an open one's look different (solid
//        vs hatched), the legend names both, the open cell's tooltip names
//        the regression
//   -> (click) the new cell -> the commit page: "new at this commit"
//   -> (click) the regression -> its page: state fixed, new at / first seen /
//        culprit / fixed commits, rates before and after with intervals, the
//        mail thread (culprit mail and its follow-up), the commits that show it
//   -> (click) its bisection -> the culprit; (click) back to the regression
//   an open commit's page: "open since" and the regression's link
//   regressions list (filters) and the check page link it
//
//   node browser_regression.mjs BASE_URL REGRESSION_ID CULPRIT_SHA OPEN_SHA FIX_SHA BISECTION_ID SINCE_SHA ARTEFACTS_DIR
//
// SINCE_SHA: where fake.bwd was introduced, failing about 12% of its trials
// since (flaky, its rate and since when in the grid's tooltip).
//
// Environment: NW_WEB_DIR (web/, whose node_modules holds playwright-core),
// CHROMIUM (default /usr/bin/chromium). Every wait has a deadline.
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const [base, rid, culprit, openSha, fixSha, bid, sinceSha, outDir] = process.argv.slice(2);
const shaOk = (s) => /^[0-9a-f]{40}$/.test(s || '');
if (!base || !/^\d+$/.test(rid || '') || !shaOk(culprit) || !shaOk(openSha) || !shaOk(fixSha) || !/^\d+$/.test(bid || '') || !shaOk(sinceSha) || !outDir) {
  console.error('usage: browser_regression.mjs BASE_URL REGRESSION_ID CULPRIT_SHA OPEN_SHA FIX_SHA BISECTION_ID SINCE_SHA ARTEFACTS_DIR');
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
let failures = 0;
function check(cond, what) {
  if (cond) console.log(`ok: ${what}`);
  else {
    failures++;
    console.log(`FAIL: ${what}`);
  }
  return cond;
}
let nshots = 0;
async function shot(page, name) {
  const file = path.join(outDir, `${String(++nshots).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  console.log(`screenshot: ${file}`);
}
/** Waits for the app to have rendered its view (no "Loading…", not busy). */
async function settled(page) {
  await page.waitForFunction(() => document.querySelector('#main .view') && !document.querySelector('#main[aria-busy="true"]'), null, { timeout: 20000 });
}
function search(page) {
  return new URL(page.url()).searchParams;
}
const text = async (loc) => ((await loc.count()) ? (await loc.first().innerText()).replace(/\s+/g, ' ').trim() : '');

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
  page.setDefaultTimeout(20000);
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

  // ---- 1. the grid: new and open regressions look different
  await page.goto(`${base}/`);
  await settled(page);
  const cell = (sha, check = 'fake.fwd') => page.locator(`table.grid tbody tr[data-href*="${sha}"] a.cell[href*="${check}/f32"]`);
  await cell(culprit).waitFor();
  const newCls = await cell(culprit).getAttribute('class');
  const openCls = await cell(openSha).getAttribute('class');
  check(/\bv-regressed\b/.test(newCls), `the culprit's cell is a new regression (${newCls})`);
  check(/\bv-open_regression\b/.test(openCls), `a later commit's cell is an open regression (${openCls})`);
  const look = (loc) => loc.evaluate((a) => {
    const s = getComputedStyle(a);
    return { bg: s.backgroundColor, img: s.backgroundImage, shadow: s.boxShadow, color: s.color, glyph: a.textContent };
  });
  const lNew = await look(cell(culprit));
  const lOpen = await look(cell(openSha));
  check(lNew.img === 'none' && lNew.bg !== 'rgba(0, 0, 0, 0)', `the new cell is solid (${lNew.bg})`);
  check(lOpen.img.includes('gradient') && lOpen.shadow !== 'none', `the open cell is hatched and outlined (${lOpen.img.slice(0, 40)}…)`);
  check(lNew.glyph !== lOpen.glyph && lNew.color !== lOpen.color, `and they differ in glyph (${lNew.glyph} / ${lOpen.glyph}) and colour, not only in hue`);
  const openTitle = await cell(openSha).getAttribute('title');
  check(openTitle.includes(`regression #${rid}`) && /open/.test(openTitle), `the open cell's tooltip names regression #${rid}: '${openTitle}'`);
  const newTitle = await cell(culprit).getAttribute('title');
  check(newTitle.includes(`regression #${rid}, new at this commit`), `the new cell's tooltip says new: '${newTitle}'`);
  const legend = await text(page.locator('ul.legend'));
  check(/regressed/.test(legend) && /open regression/.test(legend), `the legend names both: '${legend}'`);
  const sinceCell = cell(openSha, 'fake.bwd');
  const sinceTitle = await sinceCell.getAttribute('title');
  check(/\bv-flaky\b/.test(await sinceCell.getAttribute('class')) && /\d+\/\d+ failing \([\d.]+%\)/.test(sinceTitle) && sinceTitle.includes(`failing since ${sinceSha.slice(0, 8)}, where the check was introduced`), `a check failing since it was introduced: flaky, its rate in the tooltip: '${sinceTitle}'`);
  const openRow = page.locator(`table.grid tbody tr[data-href*="${openSha}"] .c-line1 .badge`);
  check((await openRow.getAttribute('class')).includes('v-open_regression'), 'an open commit\u2019s own verdict is open regression, not regressed');
  await shot(page, 'grid');

  // ---- 2. the new cell -> its commit page -> the regression
  await cell(culprit).click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'commit');
  await settled(page);
  check(search(page).get('sha') === culprit, 'clicking the new cell opens the culprit\u2019s page');
  const here1 = page.locator('.regressions-here');
  await here1.waitFor();
  check(/new at this commit/.test(await text(here1)), `the commit page says the regression is new here: '${await text(here1)}'`);
  await shot(page, 'culprit-commit');
  await here1.locator(`a.regression-link[href="/?view=regression&id=${rid}"]`).click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'regression');
  await settled(page);
  check(search(page).get('id') === rid, `the link opens regression #${rid}`);

  // ---- 3. the regression's page
  const view = page.locator('.view-regression');
  await view.locator('h1').waitFor();
  check((await text(view.locator('h1'))).includes(`Regression #${rid}`) && (await text(view.locator('h1'))).includes('fake.fwd · f32'), `heading: '${await text(view.locator('h1'))}'`);
  check((await text(view.locator('h1 .pill'))) === 'fixed', `state: '${await text(view.locator('h1 .pill'))}'`);
  const fact = async (label) => text(view.locator('.fact', { has: page.locator(`dt:text-is("${label}")`) }).locator('dd'));
  check((await view.locator('.new-at a.sha').getAttribute('title')) === culprit, 'new at: the culprit');
  const first = await view.locator('.first-seen a.sha').getAttribute('title');
  const firstNote = await text(view.locator('.first-seen'));
  check(/^[0-9a-f]{40}$/.test(first) && (first === culprit) === /the same commit/.test(firstNote), `first seen at: '${firstNote}'`);
  check((await view.locator('.culprit a.sha').getAttribute('title')) === culprit, 'culprit: named');
  check((await view.locator('.fixed-at a.sha').getAttribute('title')) === fixSha, 'fixed at: the fix');
  check(/Last good/.test(await text(view.locator('.facts'))) && /[0-9a-f]{8}/.test(await fact('Last good')), `last good: '${await fact('Last good')}'`);
  const rates = await text(view.locator('.rates'));
  check(/before 0\/\d+ failing \(0%, 95% CI 0%–[\d.]+%\)/.test(rates) && /after [1-9]\d*\/\d+ failing \([\d.]+%, 95% CI [\d.]+%–[\d.]+%\)/.test(rates), `rates before and after with Wilson intervals: '${rates}'`);
  check((await view.locator('.rates .rate-band .rate-ci').count()) === 2, 'both rates drawn with their intervals');
  const mails = view.locator('table.mail-thread tbody tr');
  check((await mails.count()) === 2, `the mail thread has ${await mails.count()} mails (culprit mail and follow-up)`);
  check(/culprit mail/.test(await text(mails.nth(0))) && /sent/.test(await text(mails.nth(0))), `first: '${await text(mails.nth(0))}'`);
  check((await mails.nth(1).getAttribute('class')) === 'reply' && /fixed/.test(await text(mails.nth(1))) && /Re: /.test(await text(mails.nth(1))) && /sent/.test(await text(mails.nth(1))), `second, a reply: '${await text(mails.nth(1))}'`);
  const shows = await view.locator('table.reg-commits tbody tr').evaluateAll((trs) => trs.map((tr) => tr.dataset.shows));
  check(shows[0] === 'new' && shows[shows.length - 1] === 'fixed' && shows.slice(1, -1).length >= 5 && shows.slice(1, -1).every((s) => s === 'open'), `commits that show it: ${shows.join(' ')}`);
  await shot(page, 'regression');

  // ---- 4. its bisection, and back
  await view.locator(`.fact a.bisection-link[href="/?view=bisection&id=${bid}"]`).click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'bisection');
  await settled(page);
  check(search(page).get('id') === bid, `the regression links its bisection #${bid}`);
  const outcome = page.locator('#outcome');
  await outcome.waitFor();
  check((await outcome.locator('a.culprit-sha').getAttribute('title')) === culprit, 'the bisection names the culprit');
  await shot(page, 'bisection');
  await page.locator(`a.regression-link[href="/?view=regression&id=${rid}"]`).first().click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'regression');
  await settled(page);
  check(search(page).get('id') === rid, 'the bisection links back to its regression');
  await page.locator('table.mail-thread').waitFor();
  check(true, 'and the regression page shows its mail thread again');

  // ---- 5. an open commit's page
  await page.goto(`${base}/?view=commit&sha=${openSha}`);
  await settled(page);
  const here2 = page.locator('.regressions-here');
  await here2.waitFor();
  check(/still open, new at/.test(await text(here2)) && (await here2.locator(`a.sha[title="${culprit}"]`).count()) === 1, `an open commit says where the regression is new: '${await text(here2)}'`);
  const row = page.locator('tr[id="fake.fwd/f32"]');
  check((await row.locator('.badge.v-open_regression').count()) === 1 && /open since/.test(await text(row)), `its result row: '${(await text(row)).slice(0, 80)}…'`);
  const bwdRow = page.locator('tr[id="fake.bwd/f32"]');
  check(/failing since it was introduced at/.test(await text(bwdRow)) && (await bwdRow.locator(`a.sha[title="${sinceSha}"]`).count()) === 1, 'the new check\u2019s row says since when it fails');
  await shot(page, 'open-commit');

  // ---- 6. the regressions list and the check page
  await page.locator('nav.mainnav a', { hasText: 'Regressions' }).click();
  await page.waitForURL((u) => u.searchParams.get('view') === 'regressions');
  await settled(page);
  const listRow = page.locator(`table.regressions tr[data-regression="${rid}"]`);
  await listRow.waitFor();
  check(/fixed/.test(await text(listRow)) && /0\/\d+ failing/.test(await text(listRow)), `the list shows #${rid}: '${await text(listRow)}'`);
  await shot(page, 'regressions');
  await page.locator('.segmented a', { hasText: 'Open' }).click();
  await page.waitForURL((u) => u.searchParams.get('state') === 'active');
  await settled(page);
  check((await page.locator(`table.regressions tr[data-regression="${rid}"]`).count()) === 0, 'the Open filter leaves the fixed regression out');
  await page.locator('.segmented a', { hasText: 'Fixed' }).click();
  await page.waitForURL((u) => u.searchParams.get('state') === 'fixed');
  await settled(page);
  await page.locator(`table.regressions tr[data-regression="${rid}"]`).waitFor();
  check(true, 'the Fixed filter lists it');
  await page.goto(`${base}/?view=check&check=fake.fwd&dtype=f32`);
  await settled(page);
  const cr = page.locator('.check-regressions');
  await cr.waitFor();
  check((await cr.locator(`a[href="/?view=regression&id=${rid}"]`).count()) === 1, 'the check page lists the regression');
  const tableNew = await page.locator(`table.check-series tr[data-sha="${culprit}"] .badge`).getAttribute('class');
  const tableOpen = await page.locator(`table.check-series tr[data-sha="${openSha}"] .badge`).getAttribute('class');
  check(/v-regressed/.test(tableNew) && /v-open_regression/.test(tableOpen), 'its table tells the new commit from the open ones');
  await shot(page, 'check');

  check(foreign.length === 0, `no request left the daemon (${foreign.slice(0, 3).join(', ')})`);
  check(failedRequests.length === 0, `no request failed (${failedRequests.slice(0, 3).join(', ')})`);
  check(errors.length === 0, `no page errors (${errors.slice(0, 3).join(' | ')})`);
} catch (e) {
  failures++;
  console.log(`FAIL: ${e && e.stack ? e.stack : e}`);
} finally {
  await browser.close();
}
if (failures) {
  console.log(`${failures} browser check(s) failed`);
  process.exit(1);
}
console.log('all browser checks passed');
