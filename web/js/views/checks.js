// The checks view: every check of the suite with its dtypes, mutes and the
// verdicts of the newest commit that has statistics; each dtype links to its
// check page (the history chart).
//   /?view=checks
import { getJSON } from '../api.js';
import { h } from '../dom.js';
import { badge, heading, notice, pill } from '../components.js';
import { absTime, url } from '../format.js';

export default {
  name: 'checks',
  nav: 'checks',

  async load(params, { signal }) {
    const r = await getJSON('/api/v1/checks', { signal });
    return { data: r.body, sig: r.text };
  },

  title() {
    return 'Checks';
  },

  render(data) {
    const checks = Array.isArray(data.checks) ? data.checks : [];
    const head = h('div', { class: 'view-head' }, heading('Checks', h('span', { class: 'subtitle' }, `${checks.length} check${checks.length === 1 ? '' : 's'}; pick a dtype for its history across commits`)));
    if (!checks.length) {
      return h('section', { class: 'view view-checks' }, head, notice('info', 'No checks known yet.', 'Checks appear once a commit has been built and its runner has listed them.'));
    }
    return h(
      'section',
      { class: 'view view-checks' },
      head,
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'data checks-list' },
          h('caption', { class: 'sr-only' }, 'Checks of the suite'),
          h('thead', null, h('tr', null, ['Check', 'Latest verdict per dtype (history)', 'Shape families', 'Kind', 'Muted'].map((t) => h('th', { scope: 'col' }, t)))),
          h(
            'tbody',
            null,
            checks.map((c) => {
              const dtypes = Array.isArray(c.dtypes) ? c.dtypes : [];
              const latest = c.latest && typeof c.latest === 'object' ? c.latest : {};
              const muted = Array.isArray(c.muted) ? c.muted : [];
              return h(
                'tr',
                null,
                h('th', { scope: 'row' }, h('a', { href: url.check(c.check), class: 'mono' }, String(c.check))),
                h(
                  'td',
                  null,
                  h(
                    'span',
                    { class: 'dtype-links' },
                    dtypes.map((d) => h('a', { href: url.check(c.check, d), class: 'chip', title: `${c.check} ${d}: history across commits` }, badge(latest[d]), ` ${d}`)),
                  ),
                ),
                h('td', { class: 'muted' }, Array.isArray(c.families) ? c.families.join(', ') : '—'),
                h('td', null, c.deterministic === false ? pill('non-deterministic', 'warn') : 'deterministic'),
                h('td', null, muted.length ? muted.map((m) => h('div', { title: m.reason ? String(m.reason) : null }, `${m.dtype === '*' ? 'all dtypes' : m.dtype} until ${absTime(m.until)}`, m.reason ? h('span', { class: 'muted' }, ` (${m.reason})`) : null)) : h('span', { class: 'muted' }, '—')),
              );
            }),
          ),
        ),
      ),
    );
  },
};
