// numwatch dashboard: a query-routed single page app. Plain ES modules served
// as they are by numwatchd from web/ (no bundler, no build step, no network
// access beyond this daemon's own /api/v1).
//
// URLs (stable; paste them into bug reports):
//   /                                 commits grid, newest first
//   /?page=N                          commits grid, page N (50 commits a page)
//   /?view=commit&sha=SHA             one commit (SHA: 4 to 40 hex digits)
//   /?view=commit&sha=SHA#CHECK/DTYPE   ... scrolled to one check x dtype row
//   /?view=checks                     the suite's checks, latest verdicts
//   /?view=check&check=C&dtype=D      one check x dtype across commits (uPlot
//                                     chart, regressions and culprits marked);
//                                     &page=N for older commits
//   /?view=bisections[&page=N]        bisections, newest first
//   /?view=bisection&id=N             one bisection: outcome, range with each
//                                     commit's probability, probes, log
//   /?view=regressions[&state=S&check=C&dtype=D&page=N]
//                                     regressions, newest first, filtered
//   /?view=regression&id=N            one regression: where it came in, its
//                                     culprit and fix, rates, bisections, mail
//   /?view=health                     daemon, GPUs, runners, queue, database
//
// Adding a view: write js/views/NAME.js exporting {name, nav, load, title,
// render[, update][, reveal]} and list it in ROUTES (and in NAV to get a
// header link). load(params, {signal}) -> {data, sig}: sig is compared between
// refreshes, so unchanged data costs no DOM work; update(main, data, params)
// may patch the page in place and return true, else render() rebuilds it.
import { ApiError, getJSON } from './js/api.js';
import { h } from './js/dom.js';
import { heading, notice, refreshTimes } from './js/components.js';
import { url } from './js/format.js';
import commitsView from './js/views/commits.js';
import commitView from './js/views/commit.js';
import healthView from './js/views/health.js';
import checksView from './js/views/checks.js';
import checkView from './js/views/check.js';
import bisectionsView from './js/views/bisections.js';
import bisectionView from './js/views/bisection.js';
import regressionsView from './js/views/regressions.js';
import regressionView from './js/views/regression.js';

const ROUTES = {
  commits: commitsView,
  commit: commitView,
  checks: checksView,
  check: checkView,
  bisections: bisectionsView,
  bisection: bisectionView,
  regressions: regressionsView,
  regression: regressionView,
  health: healthView,
};
const NAV = [
  { nav: 'commits', label: 'Commits', href: url.commits() },
  { nav: 'checks', label: 'Checks', href: url.checks() },
  { nav: 'regressions', label: 'Regressions', href: url.regressions() },
  { nav: 'bisections', label: 'Bisections', href: url.bisections() },
  { nav: 'health', label: 'Health', href: url.health() },
];
const REFRESH_MS = 5000;
const PAUSE_KEY = 'numwatch.autorefresh';

const main = document.getElementById('main');
const navEl = document.getElementById('nav');
const repoEl = document.getElementById('repo');
const statusEl = document.getElementById('refresh-status');
const toggleEl = document.getElementById('refresh-toggle');

const state = {
  gen: 0, // bumped on every navigation; stale answers are dropped
  controller: null, // aborts the in-flight load on navigation
  inflight: false,
  sig: null, // signature of the data on screen
  route: null,
  lastOk: 0,
  paused: localStorage.getItem(PAUSE_KEY) === 'off',
  repository: null,
};

function routeOf(loc = location) {
  const params = new URLSearchParams(loc.search);
  const name = params.get('view') || 'commits';
  return { name, params, view: Object.prototype.hasOwnProperty.call(ROUTES, name) ? ROUTES[name] : null };
}

function setRepository(name) {
  if (!name || name === state.repository) return;
  state.repository = String(name);
  repoEl.textContent = state.repository;
  repoEl.hidden = false;
  updateTitle();
}

function updateTitle(viewTitle) {
  if (viewTitle != null) state.viewTitle = viewTitle;
  document.title = [state.viewTitle, state.repository, 'numwatch'].filter(Boolean).join(' · ');
}

function renderNav(active) {
  navEl.replaceChildren(
    ...NAV.map((n) => h('a', { href: n.href, class: n.nav === active ? 'active' : null, 'aria-current': n.nav === active ? 'page' : null }, n.label)),
  );
}

const announceEl = document.getElementById('announce');

/** The refresh line. Screen readers hear only changes between working and failing, not every tick. */
function setStatus(kind, text) {
  if (kind === 'error' && statusEl.dataset.kind !== 'error') announceEl.textContent = text;
  else if (kind !== 'error' && statusEl.dataset.kind === 'error') announceEl.textContent = 'Updates work again.';
  statusEl.dataset.kind = kind;
  statusEl.textContent = text;
}

function stampOk() {
  state.lastOk = Date.now();
  const t = new Date(state.lastOk);
  const p = (n) => String(n).padStart(2, '0');
  setStatus(state.paused ? 'paused' : 'ok', `${state.paused ? 'Paused · updated' : 'Updated'} ${p(t.getHours())}:${p(t.getMinutes())}:${p(t.getSeconds())}`);
}

/** What a re-render must keep: scroll positions, open <details>, focus. */
function captureUi() {
  const ui = { x: window.scrollX, y: window.scrollY, scroll: {}, open: {}, focus: null };
  for (const el of main.querySelectorAll('[data-scroll-key]')) ui.scroll[el.dataset.scrollKey] = [el.scrollLeft, el.scrollTop];
  for (const el of main.querySelectorAll('details[data-key]')) ui.open[el.dataset.key] = el.open;
  const a = document.activeElement;
  if (a && a !== document.body && main.contains(a)) {
    if (a.id) ui.focus = `#${CSS.escape(a.id)}`;
    else if (a.dataset && a.dataset.k) ui.focus = `[data-k="${CSS.escape(a.dataset.k)}"]`;
    else if (a.tagName === 'A' && a.getAttribute('href')) ui.focus = `a[href="${CSS.escape(a.getAttribute('href'))}"]`;
    else if (a.dataset && a.dataset.scrollKey) ui.focus = `[data-scroll-key="${CSS.escape(a.dataset.scrollKey)}"]`;
  }
  return ui;
}

function restoreUi(ui) {
  for (const el of main.querySelectorAll('details[data-key]')) {
    if (Object.prototype.hasOwnProperty.call(ui.open, el.dataset.key)) el.open = ui.open[el.dataset.key];
  }
  for (const el of main.querySelectorAll('[data-scroll-key]')) {
    const s = ui.scroll[el.dataset.scrollKey];
    if (s) {
      el.scrollLeft = s[0];
      el.scrollTop = s[1];
    }
  }
  if (ui.focus) {
    const el = main.querySelector(ui.focus);
    if (el) el.focus({ preventScroll: true });
  }
  window.scrollTo(ui.x, ui.y);
}

/** The user is selecting text in the page (copying a command): do not pull it away. */
function selecting() {
  const sel = window.getSelection();
  return sel && !sel.isCollapsed && sel.anchorNode && main.contains(sel.anchorNode);
}

function errorView(err, route) {
  const status = err instanceof ApiError ? err.status : 0;
  const title = status === 404 ? 'Not found.' : status === 400 ? 'Bad request.' : status === 0 ? 'Cannot reach the daemon.' : `Error ${status}.`;
  return h(
    'section',
    { class: 'view view-error' },
    heading(route && route.view ? route.view.title(route.params) : 'numwatch'),
    notice('error', title, String(err && err.message ? err.message : err), ' ', status === 0 || status >= 500 ? 'Retrying every 5 s.' : h('a', { href: url.commits() }, 'Back to the commits.')),
  );
}

/**
 * Loads and renders the current URL's view. A navigation (refresh=false)
 * replaces the page and starts at the top (or at the saved scroll on back/
 * forward, or at the URL's fragment); a refresh keeps scroll, open sections
 * and focus, and re-renders only when the data changed.
 */
async function show({ refresh = false, scrollTo = null, restore = null } = {}) {
  const route = routeOf();
  if (!refresh) {
    state.gen++;
    if (state.controller) state.controller.abort();
    state.sig = null;
    state.unrevealed = null;
    state.route = route;
    renderNav(route.view ? route.view.nav : null);
  }
  const gen = state.gen;
  if (!route.view) {
    main.replaceChildren(errorView(new ApiError(`There is no '${route.name}' view.`, 404), null));
    updateTitle('Not found');
    return;
  }
  const controller = new AbortController();
  state.controller = controller;
  state.inflight = true;
  if (!refresh && !main.querySelector('.view')) main.replaceChildren(h('p', { class: 'loading', role: 'status' }, 'Loading…'));
  if (!refresh) main.setAttribute('aria-busy', 'true');
  try {
    const { data, sig } = await route.view.load(route.params, { signal: controller.signal });
    if (gen !== state.gen) return;
    if (data && data.repository) setRepository(data.repository);
    stampOk();
    if (refresh && sig === state.sig) {
      refreshTimes(main);
      return;
    }
    if (refresh && route.view.update && route.view.update(main, data, route.params)) {
      state.sig = sig;
      refreshTimes(main);
      return;
    }
    if (refresh && selecting()) return; // try again on the next tick (sig left unchanged)
    const ui = refresh ? captureUi() : null;
    const t0 = performance.now();
    const node = route.view.render(data, route.params);
    main.replaceChildren(node);
    performance.measure(`nw:render ${route.name}`, { start: t0 });
    state.sig = sig;
    updateTitle(route.view.title(route.params, data));
    if (ui || restore) {
      restoreUi(ui || restore);
      // The fragment's target may appear later (a check still running): reveal it then,
      // unless the reader has moved since.
      if (ui && state.unrevealed && window.scrollY === state.unrevealed.y && route.view.reveal()) state.unrevealed = null;
    } else if (scrollTo) {
      window.scrollTo(scrollTo[0], scrollTo[1]);
    } else if (!(route.view.reveal && route.view.reveal())) {
      window.scrollTo(0, 0);
      if (route.view.reveal && location.hash) state.unrevealed = { y: window.scrollY };
    }
  } catch (err) {
    if (err && err.name === 'AbortError') return;
    if (gen !== state.gen) return;
    const unreachable = !(err instanceof ApiError) || err.status === 0 || err.status >= 500;
    setStatus('error', unreachable ? `Update failed: ${err.message}` : String(err.message));
    // Keep showing the last good data when a refresh fails; say so in the status line.
    if ((!refresh || state.sig === null || !unreachable) && state.sig !== `error:${err.message}`) {
      main.replaceChildren(errorView(err, route));
      state.sig = `error:${err.message}`;
      updateTitle(route.view.title(route.params));
    }
  } finally {
    if (gen === state.gen) {
      state.inflight = false;
      main.removeAttribute('aria-busy');
    }
  }
}

/** In-app navigation to a same-origin dashboard URL. */
function navigate(href, { replace = false, keepScroll = false } = {}) {
  const target = new URL(href, location.href);
  // Remember where we were (scroll, open sections, focus), for the back button.
  history.replaceState({ ...(history.state || {}), ui: captureUi() }, '');
  if (replace) history.replaceState({}, '', target);
  else history.pushState({}, '', target);
  // A link that only changes a filter of the same view (data-keep-scroll) keeps the reader's place.
  show({ scrollTo: keepScroll ? [window.scrollX, window.scrollY] : null }).then(() => {
    const h1 = main.querySelector('h1');
    if (h1 && !location.hash && !keepScroll) h1.focus({ preventScroll: true });
  });
}

function isAppLink(a, e) {
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return false;
  if (a.target && a.target !== '_self') return false;
  if (a.hasAttribute('download')) return false;
  const u = new URL(a.href, location.href);
  if (u.origin !== location.origin || u.pathname !== '/') return false;
  // A fragment within the same page: let the browser scroll (hashchange reveals it).
  if (u.search === location.search && u.hash) return false;
  return true;
}

document.addEventListener('click', (e) => {
  const a = e.target.closest && e.target.closest('a[href]');
  if (!isAppLink(a, e)) return;
  e.preventDefault();
  navigate(a.href, { keepScroll: a.hasAttribute('data-keep-scroll') });
});

window.addEventListener('nw:navigate', (e) => navigate(e.detail));

window.addEventListener('popstate', (e) => {
  show({ restore: e.state && e.state.ui ? e.state.ui : null });
});

window.addEventListener('hashchange', () => {
  const route = routeOf();
  if (route.view && route.view.reveal) route.view.reveal();
});

function tick() {
  if (state.paused || document.hidden || state.inflight) return;
  show({ refresh: true });
}

function setPaused(paused, { kick = true } = {}) {
  state.paused = paused;
  localStorage.setItem(PAUSE_KEY, paused ? 'off' : 'on');
  toggleEl.setAttribute('aria-pressed', String(!paused));
  toggleEl.textContent = paused ? 'Auto-refresh off' : 'Auto-refresh on';
  toggleEl.title = paused ? 'Click to refresh this view every 5 s' : 'Refreshing this view every 5 s; click to pause';
  if (state.lastOk) stampOk();
  if (!paused && kick) tick();
}

toggleEl.addEventListener('click', () => setPaused(!state.paused));
document.addEventListener('visibilitychange', () => {
  if (!document.hidden) tick();
});

history.scrollRestoration = 'manual';
setPaused(state.paused, { kick: false });
setInterval(tick, REFRESH_MS);
show();

// The repository's name is in the commits answer; fetch it once for the other views.
if (routeOf().name !== 'commits') {
  getJSON('/api/v1/commits?limit=1')
    .then((r) => setRepository(r.body.repository))
    .catch(() => {});
}
