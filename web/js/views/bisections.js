// The bisections view: every bisection of the repository, newest first,
// PAGE_SIZE a page.
//   /?view=bisections            page 1
//   /?view=bisections&page=N     page N
import { getJSON } from '../api.js';
import { h } from '../dom.js';
import { commitLink, heading, notice, pill, timeEl } from '../components.js';
import { fmtInt, fmtPercent, fmtSeconds, isBisectionId, isId, isSha, outcomeInfo, parsePage, parseTime, url } from '../format.js';

export const PAGE_SIZE = 50;

function pager(page, pages, total) {
  const first = total ? (page - 1) * PAGE_SIZE + 1 : 0;
  const last = Math.min(total, page * PAGE_SIZE);
  const newer = page > 1 ? h('a', { href: url.bisections(page - 1), rel: 'prev', class: 'btn' }, '‹ Newer') : h('span', { class: 'btn disabled', 'aria-disabled': 'true' }, '‹ Newer');
  const older = page < pages ? h('a', { href: url.bisections(page + 1), rel: 'next', class: 'btn' }, 'Older ›') : h('span', { class: 'btn disabled', 'aria-disabled': 'true' }, 'Older ›');
  return h('nav', { class: 'pager', 'aria-label': 'Pages' }, newer, h('span', { class: 'pager-pos' }, total ? `${first}–${last} of ${total}` : '0 bisections', pages > 1 ? ` · page ${page} of ${pages}` : ''), older);
}

/** A bisection's state and outcome as one pill. */
export function outcomePill(b) {
  const o = outcomeInfo(b.outcome, b.state);
  return pill(o.label, o.tone);
}

function duration(b) {
  const a = parseTime(b.created_at);
  const z = parseTime(b.finished_at);
  return a != null && z != null ? fmtSeconds((z - a) / 1000) : '—';
}

export default {
  name: 'bisections',
  nav: 'bisections',

  async load(params, { signal }) {
    const page = parsePage(params.get('page'));
    const r = await getJSON(`/api/v1/bisections?limit=${PAGE_SIZE}&offset=${(page - 1) * PAGE_SIZE}`, { signal });
    return { data: r.body, sig: r.text };
  },

  title(params) {
    const page = parsePage(params.get('page'));
    return page > 1 ? `Bisections, page ${page}` : 'Bisections';
  },

  render(data, params) {
    const page = parsePage(params.get('page'));
    const total = Number(data.total) || 0;
    const pages = Math.max(1, Math.ceil(total / PAGE_SIZE));
    const list = Array.isArray(data.bisections) ? data.bisections : [];
    const parts = [h('div', { class: 'view-head' }, heading('Bisections', h('span', { class: 'subtitle' }, 'searches for the commit that caused a regression')), pager(page, pages, total))];
    if (!total) {
      parts.push(notice('info', 'No bisections yet.', 'The daemon starts one by itself when a check regresses; `numwatch bisect` starts one by hand.'));
      return h('section', { class: 'view view-bisections' }, parts);
    }
    if (!list.length) {
      parts.push(notice('info', `There is no page ${page}.`, h('a', { href: url.bisections(1) }, 'Go to the newest bisections.')));
      return h('section', { class: 'view view-bisections' }, parts);
    }
    parts.push(
      h(
        'div',
        { class: 'table-wrap', dataset: { scrollKey: 'bisections' } },
        h(
          'table',
          { class: 'data bisections' },
          h('caption', { class: 'sr-only' }, 'Bisections, newest first'),
          h('thead', null, h('tr', null, ['#', 'Check', 'dtype', 'Outcome', 'Culprit', 'Confidence', 'Last clean', 'Regressed at', 'Regression', 'Probes', 'Requested by', 'Started', 'Took'].map((t, i) => h('th', { scope: 'col', class: i === 5 || i === 9 ? 'num' : null }, t)))),
          h(
            'tbody',
            null,
            list.map((b) =>
              h(
                'tr',
                { class: b.outcome === 'culprit' ? 'has-culprit' : null },
                h('th', { scope: 'row' }, isBisectionId(b.id) ? h('a', { href: url.bisection(b.id), class: 'bisection-link' }, `#${b.id}`) : String(b.id)),
                h('td', null, h('a', { href: url.check(b.check, b.dtype), class: 'mono' }, String(b.check))),
                h('td', null, String(b.dtype)),
                h('td', null, outcomePill(b)),
                h('td', { class: 'culprit-cell' }, isSha(b.culprit) ? [commitLink(b.culprit, { check: b.check, dtype: b.dtype, cls: 'sha culprit-sha' }), ' ', h('span', { class: 'c-title', title: b.culprit_title == null ? null : String(b.culprit_title) }, b.culprit_title == null ? '' : String(b.culprit_title))] : h('span', { class: 'muted' }, '—')),
                h('td', { class: 'num' }, fmtPercent(b.confidence)),
                h('td', null, commitLink(b.good)),
                h('td', null, commitLink(b.bad, { check: b.check, dtype: b.dtype })),
                h('td', null, isId(b.regression) ? h('a', { href: url.regression(b.regression), class: 'regression-link' }, `#${b.regression}`) : h('span', { class: 'muted' }, '—')),
                h('td', { class: 'num' }, fmtInt(b.probes)),
                h('td', null, b.requested_by == null ? '—' : String(b.requested_by)),
                h('td', null, timeEl(b.created_at)),
                h('td', null, b.finished_at ? duration(b) : h('span', { class: 'muted' }, 'running')),
              ),
            ),
          ),
        ),
      ),
    );
    if (pages > 1) parts.push(h('div', { class: 'view-foot' }, pager(page, pages, total)));
    return h('section', { class: 'view view-bisections' }, parts);
  },
};
