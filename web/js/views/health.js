// The health view: the daemon, its runner slots, the job queue, the database
// and the repository poller.
//   /?view=health
import { getJSON } from '../api.js';
import { h } from '../dom.js';
import { commitLink, heading, notice, pill, timeEl } from '../components.js';
import { fmtInt, fmtSeconds, isSha, splitQueueKey } from '../format.js';

const SLOT_TONES = { idle: 'neutral', claiming: 'busy', loading: 'busy', starting: 'busy', running: 'good', finishing: 'busy', restarting: 'warn', stopped: 'bad' };

function card(title, tone, value, ...detail) {
  return h('section', { class: `card tone-border-${tone}`, 'aria-label': title }, h('h2', { class: 'card-title' }, title), h('div', { class: 'card-value' }, value), detail.length ? h('div', { class: 'card-detail' }, detail) : null);
}

function queueTable(queue) {
  const kinds = new Map();
  const states = new Set(['queued', 'running']);
  for (const [k, n] of Object.entries(queue || {})) {
    const [kind, state] = splitQueueKey(k);
    states.add(state);
    if (!kinds.has(kind)) kinds.set(kind, {});
    kinds.get(kind)[state] = n;
  }
  if (!kinds.size) return h('p', { class: 'muted' }, 'The queue is empty: no build or trial job is queued or running.');
  const cols = [...states];
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: 'data queue' },
      h('caption', { class: 'sr-only' }, 'Jobs by kind and state'),
      h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Job kind'), cols.map((s) => h('th', { scope: 'col', class: 'num' }, s)))),
      h(
        'tbody',
        null,
        [...kinds.entries()]
          .sort((a, b) => a[0].localeCompare(b[0]))
          .map(([kind, byState]) => h('tr', null, h('th', { scope: 'row' }, kind), cols.map((s) => h('td', { class: 'num' }, fmtInt(byState[s] || 0))))),
      ),
    ),
  );
}

function slotsTable(slots) {
  if (!Array.isArray(slots) || !slots.length) return h('p', { class: 'muted' }, 'This daemon has no runner slots.');
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: 'data slots' },
      h('caption', { class: 'sr-only' }, 'Runner slots'),
      h(
        'thead',
        null,
        h('tr', null, ['Slot', 'Device', 'State', 'Commit', 'Check', 'dtype', 'Runner pid', 'Restarts', 'Trials'].map((t, i) => h('th', { scope: 'col', class: i >= 6 ? 'num' : null }, t))),
      ),
      h(
        'tbody',
        null,
        slots.map((s) =>
          h(
            'tr',
            null,
            h('th', { scope: 'row' }, String(s.name)),
            h('td', null, Number(s.gpu) >= 0 ? `GPU ${s.gpu}` : 'host (CPU)'),
            h('td', null, pill(String(s.state), SLOT_TONES[s.state] || 'neutral')),
            h('td', null, isSha(s.commit) ? commitLink(s.commit, { check: s.check || undefined, dtype: s.dtype || undefined }) : h('span', { class: 'muted' }, '—')),
            h('td', null, s.check ? String(s.check) : h('span', { class: 'muted' }, '—')),
            h('td', null, s.dtype ? String(s.dtype) : h('span', { class: 'muted' }, '—')),
            h('td', { class: 'num' }, Number(s.runner_pid) > 0 ? String(s.runner_pid) : '—'),
            h('td', { class: Number(s.restarts) > 0 ? 'num warn' : 'num' }, fmtInt(s.restarts)),
            h('td', { class: 'num' }, fmtInt(s.trials)),
          ),
        ),
      ),
    ),
  );
}

export default {
  name: 'health',
  nav: 'health',

  async load(params, { signal }) {
    // 503 still carries the whole health object (database unavailable).
    const r = await getJSON('/api/v1/health', { signal, accept: [503] });
    // uptime_s changes every second; leave it out of the change signature.
    const { uptime_s, ...rest } = r.body;
    return { data: r.body, sig: JSON.stringify(rest) + '|' + Math.floor((uptime_s || 0) / 60) };
  },

  title() {
    return 'Health';
  },

  render(d) {
    const ok = d.status === 'ok';
    const dbOk = d.database === 'ok';
    const pollBad = Boolean(d.poll_error) || Number(d.poll_failures) > 0;
    const busy = Array.isArray(d.slots) ? d.slots.filter((s) => s.state !== 'idle' && s.state !== 'stopped').length : 0;
    return h(
      'section',
      { class: 'view view-health' },
      h(
        'div',
        { class: 'view-head' },
        heading('Health', pill(ok ? 'ok' : String(d.status || 'unknown'), ok ? 'good' : 'bad')),
        h('p', { class: 'subtitle' }, `numwatchd ${d.version || '?'} on ${d.node || '?'} · up ${fmtSeconds(d.uptime_s)}`, d.draining ? [' · ', pill('draining: finishing work before exit', 'warn')] : null),
      ),
      ok ? null : notice('error', 'The daemon reports a problem.', dbOk ? 'See the cards below.' : 'The database is unavailable: results are not being stored or served.'),
      h(
        'div',
        { class: 'cards' },
        card('Database', dbOk ? 'good' : 'bad', pill(dbOk ? 'ok' : String(d.database || 'unknown'), dbOk ? 'good' : 'bad'), `${fmtInt(d.store_pending)} result${Number(d.store_pending) === 1 ? '' : 's'} waiting to be written · ${fmtInt(d.trials_stored)} trials stored since start`),
        card(
          'Polling',
          pollBad ? 'bad' : 'good',
          d.polled_at ? h('span', null, 'last poll ', timeEl(d.polled_at)) : 'not polled yet',
          d.poll_error ? h('div', { class: 'error-inline' }, String(d.poll_error)) : null,
          `${fmtInt(d.poll_failures)} failed poll${Number(d.poll_failures) === 1 ? '' : 's'} in a row · ${fmtInt(d.commits)} commits known`,
        ),
        card('Build', d.building ? 'busy' : 'neutral', d.building ? h('span', null, 'building ', commitLink(String(d.building))) : 'idle'),
        card('Slots', busy ? 'good' : 'neutral', `${busy} of ${Array.isArray(d.slots) ? d.slots.length : 0} busy`),
      ),
      h('section', { 'aria-labelledby': 'slots-h' }, h('h2', { id: 'slots-h' }, 'Runner slots'), slotsTable(d.slots)),
      h('section', { 'aria-labelledby': 'queue-h' }, h('h2', { id: 'queue-h' }, 'Queue'), queueTable(d.queue)),
      h('details', { class: 'raw', dataset: { key: 'raw-health' } }, h('summary', null, 'Raw health answer'), h('pre', null, JSON.stringify(d, null, 2))),
    );
  },
};
