// The regressions view: every regression of the repository, newest first,
// PAGE_SIZE a page, filtered by state, check and dtype.
//   /?view=regressions                          all
//   /?view=regressions&state=active             not closed (open, bisecting, culprit, no_culprit)
//   /?view=regressions&state=S                  one state (open, bisecting, culprit, no_culprit,
//                                               check_changed, fixed, withdrawn) or closed
//   /?view=regressions&check=C[&dtype=D]        one check (x dtype)
//   ...&page=N                                  older ones
import { ApiError, getJSON } from '../api.js';
import { h } from '../dom.js';
import { commitLink, heading, notice, pill, timeEl } from '../components.js';
import { fmtRate, isId, isName, isSha, parsePage, regressionStateInfo, url } from '../format.js';

export const PAGE_SIZE = 50;

/** The ?state= values the API takes, in the order the filter offers them ('' is all). */
export const STATE_FILTERS = [
  { state: '', label: 'All' },
  { state: 'active', label: 'Open' },
  { state: 'fixed', label: 'Fixed' },
  { state: 'check_changed', label: 'Check changed' },
  { state: 'withdrawn', label: 'Withdrawn' },
];
const STATES = new Set(['', 'active', 'closed', 'open', 'bisecting', 'culprit', 'no_culprit', 'check_changed', 'fixed', 'withdrawn']);

export function isRegressionStateFilter(s) {
  return typeof s === 'string' && STATES.has(s);
}

function filters(params) {
  return { state: params.get('state') || '', check: params.get('check') || '', dtype: params.get('dtype') || '' };
}

function pager(f, page, pages, total) {
  const first = total ? (page - 1) * PAGE_SIZE + 1 : 0;
  const last = Math.min(total, page * PAGE_SIZE);
  const newer = page > 1 ? h('a', { href: url.regressions({ ...f, page: page - 1 }), rel: 'prev', class: 'btn' }, '‹ Newer') : h('span', { class: 'btn disabled', 'aria-disabled': 'true' }, '‹ Newer');
  const older = page < pages ? h('a', { href: url.regressions({ ...f, page: page + 1 }), rel: 'next', class: 'btn' }, 'Older ›') : h('span', { class: 'btn disabled', 'aria-disabled': 'true' }, 'Older ›');
  return h('nav', { class: 'pager', 'aria-label': 'Pages' }, newer, h('span', { class: 'pager-pos' }, total ? `${first}–${last} of ${total}` : '0 regressions', pages > 1 ? ` · page ${page} of ${pages}` : ''), older);
}

/** A regression's state as a pill, with what it means as its tooltip. */
export function statePill(state) {
  const s = regressionStateInfo(state);
  return pill(s.label, s.tone, s.help || null);
}

export default {
  name: 'regressions',
  nav: 'regressions',

  async load(params, { signal }) {
    const f = filters(params);
    if (!isRegressionStateFilter(f.state)) throw new ApiError(`'${f.state}' is not a regression state`, 400);
    if (f.check && !isName(f.check)) throw new ApiError(`'${f.check}' is not a check name`, 400);
    if (f.dtype && !isName(f.dtype)) throw new ApiError(`'${f.dtype}' is not a dtype`, 400);
    const page = parsePage(params.get('page'));
    let q = `limit=${PAGE_SIZE}&offset=${(page - 1) * PAGE_SIZE}`;
    for (const k of ['state', 'check', 'dtype']) if (f[k]) q += `&${k}=${encodeURIComponent(f[k])}`;
    const r = await getJSON(`/api/v1/regressions?${q}`, { signal });
    return { data: r.body, sig: r.text };
  },

  title(params) {
    const f = filters(params);
    const what = [f.check, f.dtype].filter(Boolean).join(' · ');
    return `Regressions${what ? ` of ${what}` : ''}`;
  },

  render(data, params) {
    const f = filters(params);
    const page = parsePage(params.get('page'));
    const total = Number(data.total) || 0;
    const pages = Math.max(1, Math.ceil(total / PAGE_SIZE));
    const list = Array.isArray(data.regressions) ? data.regressions : [];
    const stateSwitch = h(
      'div',
      { class: 'segmented', role: 'group', 'aria-label': 'Which regressions to list' },
      STATE_FILTERS.map((s) => h('a', { href: url.regressions({ ...f, state: s.state }), 'aria-current': s.state === f.state ? 'true' : null, 'data-keep-scroll': true }, s.label)),
    );
    const scope = f.check
      ? h('p', { class: 'subtitle' }, 'Of ', h('a', { href: url.check(f.check, f.dtype), class: 'mono' }, [f.check, f.dtype].filter(Boolean).join(' · ')), ' only · ', h('a', { href: url.regressions({ state: f.state }) }, 'every check'))
      : null;
    const parts = [
      h('div', { class: 'view-head' }, heading('Regressions', h('span', { class: 'subtitle' }, 'a check × dtype getting worse at one commit, until a later one fixes it')), stateSwitch, pager(f, page, pages, total)),
      scope,
    ];
    if (!total) {
      parts.push(notice('info', f.state || f.check ? 'No regression matches.' : 'No regressions yet.', 'A regression is raised when a commit is worse than the commit before it; later commits that still show it point at the same one.'));
      return h('section', { class: 'view view-regressions' }, parts);
    }
    if (!list.length) {
      parts.push(notice('info', `There is no page ${page}.`, h('a', { href: url.regressions(f) }, 'Go to the newest regressions.')));
      return h('section', { class: 'view view-regressions' }, parts);
    }
    const heads = ['#', 'Check', 'dtype', 'State', 'New at', 'Last good', 'Culprit', 'Fixed at', 'Rate before', 'Rate after', 'Bisection', 'Opened'];
    parts.push(
      h(
        'div',
        { class: 'table-wrap', dataset: { scrollKey: 'regressions' } },
        h(
          'table',
          { class: 'data regressions' },
          h('caption', { class: 'sr-only' }, 'Regressions, newest first'),
          h('thead', null, h('tr', null, heads.map((t) => h('th', { scope: 'col' }, t)))),
          h(
            'tbody',
            null,
            list.map((r) =>
              h(
                'tr',
                { class: `state-${regressionStateInfo(r.state).tone}`, dataset: { regression: String(r.id) } },
                h('th', { scope: 'row' }, isId(r.id) ? h('a', { href: url.regression(r.id), class: 'regression-link' }, `#${r.id}`) : String(r.id)),
                h('td', null, isName(r.check) ? h('a', { href: url.check(r.check, r.dtype), class: 'mono' }, String(r.check)) : String(r.check)),
                h('td', null, String(r.dtype)),
                h('td', null, statePill(r.state)),
                h('td', { class: 'title-cell' }, commitLink(r.new_at, { check: r.check, dtype: r.dtype }), ' ', h('span', { class: 'c-title', title: r.new_at_title == null ? null : String(r.new_at_title) }, r.new_at_title == null ? '' : String(r.new_at_title))),
                h('td', null, isSha(r.good) ? commitLink(r.good) : h('span', { class: 'muted', title: 'the check had no result before' }, 'none')),
                h('td', null, isSha(r.culprit) ? commitLink(r.culprit, { check: r.check, dtype: r.dtype, cls: 'sha culprit-sha' }) : h('span', { class: 'muted' }, '—')),
                h('td', null, isSha(r.fixed) ? commitLink(r.fixed, { check: r.check, dtype: r.dtype }) : h('span', { class: 'muted' }, '—')),
                h('td', { class: 'rate' }, fmtRate(r.rate_before)),
                h('td', { class: 'rate' }, fmtRate(r.rate_after)),
                h('td', null, isId(r.bisection) ? h('a', { href: url.bisection(r.bisection), class: 'bisection-link' }, `#${r.bisection}`) : h('span', { class: 'muted' }, '—')),
                h('td', null, timeEl(r.created_at)),
              ),
            ),
          ),
        ),
      ),
    );
    if (pages > 1) parts.push(h('div', { class: 'view-foot' }, pager(f, page, pages, total)));
    return h('section', { class: 'view view-regressions' }, parts);
  },
};
