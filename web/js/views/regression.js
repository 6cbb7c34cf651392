// The regression view: one regression of one check x dtype. Where it came in
// (the commit it is new at: its culprit once a bisection confirmed one, else
// the first commit judged to show it), the state just before, the culprit, the
// commit that fixed it; its failure rate before and after with their Wilson
// intervals; its bisections; its mail thread (the culprit commit's one mail
// and the follow-ups in its thread); and the commits that show it.
//   /?view=regression&id=N
//   /?view=regression&id=N&page=P    older pages of the commits that show it
import { ApiError, getJSON } from '../api.js';
import { h } from '../dom.js';
import { badge, commitLink, facts, heading, pill, timeEl } from '../components.js';
import { absTime, fmtInt, fmtPercent, fmtRate, isId, isName, isSha, outcomeInfo, parsePage, regressionActive, regressionStateInfo, shortSha, url } from '../format.js';
import { statePill } from './regressions.js';

/** Commits that show the regression, a page. */
export const COMMITS_PAGE = 200;

/** Mail kinds (docs/api.md, mail thread), in words. */
const MAIL_KINDS = {
  culprit: 'culprit mail',
  withdrawn: 'culprit withdrawn',
  fixed: 'fixed',
};
const MAIL_TONES = { sent: 'good', pending: 'busy', failed: 'bad' };

/**
 * What the rate panel draws for the rates before and after: each side's rate
 * and 95% interval as fractions of a common scale (the larger upper end, with
 * some room, at least 1%). Pure, for the unit tests; null for a side without
 * trials.
 */
export function rateBands(before, after) {
  const side = (s) => {
    if (!s || typeof s !== 'object' || !(Number(s.trials) > 0)) return null;
    const rate = s.rate != null && Number.isFinite(Number(s.rate)) ? Number(s.rate) : Number(s.failures) / Number(s.trials);
    const w = Array.isArray(s.wilson95) && s.wilson95.length === 2 && s.wilson95.every((x) => Number.isFinite(Number(x))) ? s.wilson95.map(Number) : [rate, rate];
    return { rate, lo: Math.max(0, w[0]), hi: Math.min(1, w[1]) };
  };
  const b = side(before);
  const a = side(after);
  const top = Math.min(1, Math.max(0.01, ...[b, a].filter(Boolean).map((x) => x.hi * 1.15)));
  const scaled = (x) => (x ? { ...x, at: x.rate / top, from: x.lo / top, to: x.hi / top } : null);
  return { scale: top, before: scaled(b), after: scaled(a) };
}

function rateRow(label, side, band) {
  return h(
    'div',
    { class: 'rate-row' },
    h('span', { class: 'rate-label' }, label),
    h(
      'span',
      { class: 'rate-band', role: 'img', 'aria-label': `${label}: ${fmtRate(side)}` },
      band ? [h('span', { class: 'rate-ci', style: `left: ${(band.from * 100).toFixed(2)}%; width: ${Math.max(0.5, (band.to - band.from) * 100).toFixed(2)}%` }), h('span', { class: 'rate-at', style: `left: ${(band.at * 100).toFixed(2)}%` })] : null,
    ),
    h('span', { class: 'rate-text' }, fmtRate(side)),
  );
}

function ratesPanel(r) {
  const bands = rateBands(r.rate_before, r.rate_after);
  return h(
    'section',
    { class: 'panel rates', 'aria-labelledby': 'rates-h' },
    h('h2', { id: 'rates-h' }, 'Failure rate before and after'),
    rateRow('before', r.rate_before, bands.before),
    rateRow('after', r.rate_after, bands.after),
    h('p', { class: 'muted small' }, `Bar: the rate (tick) and its 95% Wilson interval, on a scale from 0 to ${fmtPercent(bands.scale)}. Before: the rate it was judged against (the library’s recent rate, or the commit before); after: at the first commit judged to show it.`),
  );
}

function wherePanel(r) {
  const start = r.culprit && r.new_at === r.culprit ? 'the culprit a bisection confirmed' : 'the first commit judged to show it';
  return h(
    'section',
    { class: 'panel', 'aria-label': 'Regression' },
    facts([
      ['Check', isName(r.check) ? h('a', { href: url.check(r.check, r.dtype), class: 'mono' }, `${r.check} · ${r.dtype}`) : String(r.check)],
      ['State', h('span', null, statePill(r.state), h('span', { class: 'muted' }, ` ${regressionStateInfo(r.state).help}`))],
      ['New at', isSha(r.new_at) ? h('span', { class: 'new-at' }, commitLink(r.new_at, { n: 12, check: r.check, dtype: r.dtype }), ' ', h('span', null, r.new_at_title == null ? '' : String(r.new_at_title)), h('span', { class: 'muted' }, ` (${start})`)) : '—'],
      ['First seen at', isSha(r.first) ? h('span', { class: 'first-seen' }, commitLink(r.first, { n: 12, check: r.check, dtype: r.dtype }), r.first === r.new_at ? h('span', { class: 'muted' }, ' (the same commit)') : h('span', { class: 'muted' }, ' (first judged to show it; the commits from the culprit up to it passed by chance)')) : '—'],
      ['Last good', isSha(r.good) ? commitLink(r.good, { n: 12, check: r.check, dtype: r.dtype }) : h('span', { class: 'muted' }, 'none: the check had no result before')],
      ['Culprit', isSha(r.culprit) ? h('span', { class: 'culprit' }, commitLink(r.culprit, { n: 12, check: r.check, dtype: r.dtype, cls: 'sha culprit-sha' }), ' ', h('span', null, r.culprit_title == null ? '' : String(r.culprit_title))) : h('span', { class: 'muted' }, r.state === 'bisecting' ? 'being searched for' : r.state === 'check_changed' ? 'nobody is blamed: the check’s inputs changed' : 'not named')],
      ['Fixed at', isSha(r.fixed) ? h('span', { class: 'fixed-at' }, commitLink(r.fixed, { n: 12, check: r.check, dtype: r.dtype }), ' ', h('span', null, r.fixed_title == null ? '' : String(r.fixed_title))) : h('span', { class: 'muted' }, regressionActive(r.state) ? 'not yet: still open' : '—')],
      Number(r.changed_seeds) > 0 ? ['Changed seeds', `${fmtInt(r.changed_seeds)} seed${Number(r.changed_seeds) === 1 ? '' : 's'} whose inputs changed at this commit`] : null,
      ['Bisection', isId(r.bisection) ? h('a', { href: url.bisection(r.bisection), class: 'bisection-link' }, `Bisection #${r.bisection}`) : h('span', { class: 'muted' }, 'none')],
      ['Opened', h('span', null, absTime(r.created_at), ' · ', timeEl(r.created_at))],
      ['Closed', r.closed_at ? h('span', null, absTime(r.closed_at), ' · ', timeEl(r.closed_at)) : h('span', { class: 'muted' }, 'open')],
    ]),
  );
}

function bisectionsSection(r) {
  const list = Array.isArray(r.bisections) ? r.bisections : [];
  return h(
    'section',
    { 'aria-labelledby': 'rb-h' },
    h('h2', { id: 'rb-h' }, `Bisections (${list.length})`),
    list.length
      ? h(
          'ul',
          { class: 'plain-list' },
          list.map((b) => {
            const o = outcomeInfo(b.outcome, b.state);
            return h(
              'li',
              null,
              isId(b.id) ? h('a', { href: url.bisection(b.id), class: 'bisection-link' }, `Bisection #${b.id}`) : String(b.id),
              ' ',
              pill(o.label, o.tone),
              ' range ',
              commitLink(b.good),
              ' .. ',
              commitLink(b.bad),
              b.outcome === 'culprit' && isSha(b.culprit) ? [': culprit ', commitLink(b.culprit, { cls: 'sha culprit-sha' }), b.confidence != null ? ` (${fmtPercent(b.confidence)} sure)` : null] : null,
              ' · started ',
              timeEl(b.created_at),
            );
          }),
        )
      : h('p', { class: 'muted' }, r.state === 'check_changed' ? 'None: a change of the check’s inputs is not bisected.' : r.state === 'open' ? 'None yet: one is queued once a clean commit before it is known.' : 'None.'),
  );
}

function mailSection(r) {
  const mails = Array.isArray(r.mail) ? r.mail : [];
  const same = Array.isArray(r.same_culprit) ? r.same_culprit : [];
  let empty;
  if (!isSha(r.culprit)) empty = 'No mail: mail goes to a culprit once a bisection has named and confirmed one.';
  else empty = 'No mail yet for its culprit (muted checks get none; mail may be waiting for other regressions the same commit may have caused).';
  return h(
    'section',
    { 'aria-labelledby': 'mail-h' },
    h('h2', { id: 'mail-h' }, `Mail thread (${mails.length})`),
    isSha(r.culprit) ? h('p', { class: 'muted small' }, 'One mail per culprit commit, listing every check it broke; follow-ups (withdrawn, fixed) answer it in the same thread.') : null,
    same.length
      ? h('p', { class: 'same-culprit' }, 'Its culprit also brought in: ', same.map((o, i) => [i ? ', ' : '', isId(o.id) ? h('a', { href: url.regression(o.id), class: 'regression-link' }, `#${o.id}`) : String(o.id), ` ${o.check} · ${o.dtype} `, statePill(o.state)]), ' (the same thread).')
      : null,
    mails.length
      ? h(
          'div',
          { class: 'table-wrap', dataset: { scrollKey: 'mail' } },
          h(
            'table',
            { class: 'data mail-thread' },
            h('caption', { class: 'sr-only' }, 'The culprit mail and its follow-ups, oldest first'),
            h('thead', null, h('tr', null, ['Kind', 'Subject', 'State', 'Sent', 'Recipients', 'Bisection'].map((t, i) => h('th', { scope: 'col', class: i === 4 ? 'num' : null }, t)))),
            h(
              'tbody',
              null,
              mails.map((m) =>
                h(
                  'tr',
                  { class: m.in_reply_to ? 'reply' : 'root', dataset: { kind: String(m.kind) } },
                  h('th', { scope: 'row' }, m.in_reply_to ? h('span', { class: 'muted', 'aria-hidden': 'true' }, '↳ ') : null, MAIL_KINDS[m.kind] || String(m.kind)),
                  h('td', { class: 'subject', title: m.message_id ? `Message-ID ${m.message_id}` : null }, m.subject == null ? '' : String(m.subject)),
                  h('td', null, pill(String(m.state), MAIL_TONES[m.state] || 'neutral', m.last_error ? String(m.last_error) : null), Number(m.attempts) > 1 ? h('span', { class: 'muted' }, ` ${fmtInt(m.attempts)} attempts`) : null),
                  h('td', null, m.sent_at ? timeEl(m.sent_at) : h('span', { class: 'muted' }, 'not yet')),
                  h('td', { class: 'num' }, fmtInt(m.recipients)),
                  h('td', null, isId(m.bisection) ? h('a', { href: url.bisection(m.bisection) }, `#${m.bisection}`) : '—'),
                ),
              ),
            ),
          ),
        )
      : h('p', { class: 'muted' }, empty),
  );
}

const SHOWS = {
  new: { verdict: 'regressed', words: 'new here' },
  open: { verdict: 'open_regression', words: 'still shows it' },
  fixed: { verdict: 'improved', words: 'fixes it' },
  check_changed: { verdict: 'check_changed', words: 'inputs changed' },
};

function commitsSection(r, id, page) {
  const list = Array.isArray(r.commits) ? r.commits : [];
  const total = Number(r.commits_total) || 0;
  const limit = Number(r.limit) || COMMITS_PAGE;
  const pages = Math.max(1, Math.ceil(total / limit));
  const link = (p, text) => h('a', { href: `${url.regression(id)}${p > 1 ? `&page=${p}` : ''}#commits-h`, class: 'btn', 'data-keep-scroll': true }, text);
  return h(
    'section',
    { 'aria-labelledby': 'commits-h' },
    h(
      'div',
      { class: 'section-head' },
      h('h2', { id: 'commits-h' }, `Commits that show it (${fmtInt(total)})`),
      pages > 1 ? h('nav', { class: 'pager', 'aria-label': 'Pages of commits' }, page > 1 ? link(page - 1, '‹ Earlier') : null, h('span', { class: 'pager-pos' }, `page ${page} of ${pages}, oldest first`), page < pages ? link(page + 1, 'Later ›') : null) : null,
    ),
    list.length
      ? h(
          'div',
          { class: 'table-wrap', dataset: { scrollKey: 'reg-commits' } },
          h(
            'table',
            { class: 'data reg-commits' },
            h('caption', { class: 'sr-only' }, 'Commits whose verdict points at this regression, oldest first'),
            h('thead', null, h('tr', null, ['Pos.', 'Commit', 'Title', 'Verdict'].map((t, i) => h('th', { scope: 'col', class: i === 0 ? 'num' : null }, t)))),
            h(
              'tbody',
              null,
              list.map((c) => {
                const s = SHOWS[c.shows] || { verdict: c.verdict, words: '' };
                return h(
                  'tr',
                  { dataset: { shows: String(c.shows) }, class: c.shows === 'new' ? 'culprit-row' : null },
                  h('td', { class: 'num' }, c.position == null ? '—' : `#${c.position}`),
                  h('th', { scope: 'row' }, commitLink(c.sha, { check: r.check, dtype: r.dtype })),
                  h('td', { class: 'title-cell', title: c.title == null ? null : String(c.title) }, c.title == null ? '' : String(c.title)),
                  h('td', null, badge(s.verdict), s.words ? h('span', { class: 'muted' }, ` ${s.words}`) : null),
                );
              }),
            ),
          ),
        )
      : h('p', { class: 'muted' }, page > 1 ? 'No commits on this page.' : 'None.'),
  );
}

export default {
  name: 'regression',
  nav: 'regressions',

  async load(params, { signal }) {
    const id = (params.get('id') || '').trim();
    if (!isId(id)) throw new ApiError(id ? `'${id}' is not a regression id` : 'no regression given: add &id=<number> to the URL', 400);
    const page = parsePage(params.get('page'));
    const r = await getJSON(`/api/v1/regressions/${id}?limit=${COMMITS_PAGE}&offset=${(page - 1) * COMMITS_PAGE}`, { signal });
    return { data: r.body, sig: r.text };
  },

  title(params, data) {
    if (data && data.id != null) return `Regression #${data.id} ${data.check || ''} ${data.dtype || ''}`.trim();
    return `Regression ${params.get('id') || ''}`.trim();
  },

  render(r, params) {
    const id = String(r.id);
    const page = parsePage(params.get('page'));
    const head = h(
      'div',
      { class: 'view-head' },
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: url.regressions() }, 'Regressions'), ' › ', h('span', null, `#${id}`)),
      heading(`Regression #${id}`, isName(r.check) ? h('a', { href: url.check(r.check, r.dtype), class: 'mono head-check' }, `${r.check} · ${r.dtype}`) : null, statePill(r.state)),
      h('p', { class: 'subtitle' }, isSha(r.new_at) ? ['New at ', h('span', { class: 'sha' }, shortSha(r.new_at)), regressionActive(r.state) ? ', still open' : isSha(r.fixed) ? [', fixed at ', h('span', { class: 'sha' }, shortSha(r.fixed))] : ''] : null),
    );
    return h(
      'section',
      { class: `view view-regression state-${String(r.state).replace(/[^a-z_]/g, '')}` },
      head,
      h('div', { class: 'panels' }, wherePanel(r), ratesPanel(r)),
      mailSection(r),
      bisectionsSection(r),
      commitsSection(r, id, page),
    );
  },
};
