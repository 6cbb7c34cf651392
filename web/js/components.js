// Small building blocks shared by the views.
import { h } from './dom.js';
import { VERDICTS, absTime, isSha, relTime, shortSha, url, verdictClass, verdictInfo } from './format.js';

/** A verdict pill: colour, glyph and words. */
export function badge(verdict, { title } = {}) {
  const info = verdictInfo(verdict);
  return h(
    'span',
    { class: `badge ${verdictClass(verdict)}`, title: title || info.help },
    info.glyph ? h('span', { class: 'glyph', 'aria-hidden': 'true' }, info.glyph) : null,
    info.label,
  );
}

/** A neutral or coloured status pill for non-verdict states (build status, slot state, health). */
export function pill(text, tone = 'neutral', title) {
  return h('span', { class: `pill tone-${tone}`, title }, text);
}

/** <time> with a relative text that the refresh loop keeps current (data-rel). */
export function timeEl(iso) {
  if (iso == null || iso === '') return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: String(iso), title: absTime(iso), dataset: { rel: String(iso) } }, relTime(iso));
}

/** Re-renders every relative time under root. */
export function refreshTimes(root, now = Date.now()) {
  for (const t of root.querySelectorAll('time[data-rel]')) {
    const text = relTime(t.dataset.rel, now);
    if (t.textContent !== text) t.textContent = text;
  }
}

/** A link to a commit page when sha looks like one; plain text otherwise. */
export function commitLink(sha, { text, n = 8, check, dtype, cls = 'sha' } = {}) {
  if (!isSha(sha)) return h('span', { class: 'muted' }, sha ? String(sha) : '—');
  return h('a', { href: url.commit(sha, check, dtype), class: cls, title: sha }, text != null ? text : shortSha(sha, n));
}

/** The colour legend of the grid. */
export function legend({ counts } = {}) {
  return h(
    'ul',
    { class: 'legend', 'aria-label': 'Verdict colours' },
    VERDICTS.map((v) =>
      h(
        'li',
        { title: v.help },
        h('span', { class: `swatch ${verdictClass(v.key)}`, 'aria-hidden': 'true' }, v.glyph),
        v.label,
        counts && counts[v.key] ? h('span', { class: 'count' }, ` ${counts[v.key]}`) : null,
      ),
    ),
  );
}

/** The page heading; focused after in-app navigation so screen readers announce the new page. */
export function heading(text, ...extra) {
  return h('h1', { tabindex: '-1', class: 'page-title' }, text, extra);
}

/** A message box for errors and empty states. */
export function notice(kind, title, ...body) {
  return h('div', { class: `notice notice-${kind}`, role: kind === 'error' ? 'alert' : null }, h('strong', null, title), body.length ? h('div', null, body) : null);
}

/** A two-column definition list from [label, value] pairs (null pairs skipped). */
export function facts(pairs, cls = 'facts') {
  return h(
    'dl',
    { class: cls },
    pairs.filter(Boolean).map(([k, v]) => h('div', { class: 'fact' }, h('dt', null, k), h('dd', null, v))),
  );
}

/** A build status pill. */
export function buildPill(status) {
  if (status == null) return pill('not built yet', 'neutral');
  if (status === 'ok') return pill('ok', 'good');
  const words = { failed: 'failed', timeout: 'timed out', no_runner: 'no runner' };
  return pill(words[status] || String(status), 'bad');
}
