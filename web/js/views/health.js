// The health view: the daemon, its GPUs and runner slots (runner processes,
// restarts), the job queue and its depth, the database and the repository
// poller, and every daemon sharing the database (heartbeat, slots, whether its
// settings or schema differ from the others').
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

/** Queue depth from the health answer's queue ({KIND_STATE: n}): {queued, running, other}. */
export function queueDepth(queue) {
  const out = { queued: 0, running: 0, other: 0 };
  for (const [k, n] of Object.entries(queue || {})) {
    const state = splitQueueKey(k)[1];
    const v = Number(n) || 0;
    if (state === 'queued') out.queued += v;
    else if (state === 'running') out.running += v;
    else out.other += v;
  }
  return out;
}

/** Slots grouped by device: [{gpu, slots}], GPUs by index first, then host slots (gpu -1). */
export function byDevice(slots) {
  const m = new Map();
  for (const s of Array.isArray(slots) ? slots : []) {
    const g = Number.isInteger(Number(s.gpu)) && Number(s.gpu) >= 0 ? Number(s.gpu) : -1;
    if (!m.has(g)) m.set(g, []);
    m.get(g).push(s);
  }
  return [...m.entries()].sort((a, b) => (a[0] < 0) - (b[0] < 0) || a[0] - b[0]).map(([gpu, list]) => ({ gpu, slots: list }));
}

function devicesTable(slots) {
  const devs = byDevice(slots);
  if (!devs.length) return h('p', { class: 'muted' }, 'No devices: this daemon has no runner slots.');
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: 'data devices' },
      h('caption', { class: 'sr-only' }, 'GPUs and runners'),
      h('thead', null, h('tr', null, ['Device', 'Slots', 'Busy', 'Runners (pid)', 'Restarts', 'Trials run'].map((t, i) => h('th', { scope: 'col', class: i === 4 || i === 5 ? 'num' : null }, t)))),
      h(
        'tbody',
        null,
        devs.map(({ gpu, slots: list }) => {
          const pids = list.filter((s) => Number(s.runner_pid) > 0).map((s) => String(s.runner_pid));
          const restarts = list.reduce((n, s) => n + (Number(s.restarts) || 0), 0);
          const busy = list.filter((s) => s.state !== 'idle' && s.state !== 'stopped').length;
          return h(
            'tr',
            null,
            h('th', { scope: 'row' }, gpu >= 0 ? `GPU ${gpu}` : 'host (CPU)'),
            h('td', null, list.map((s) => String(s.name)).join(', ')),
            h('td', null, `${busy} of ${list.length}`),
            h('td', null, pids.length ? `${pids.length} live (${pids.join(', ')})` : h('span', { class: 'muted' }, 'none running')),
            h('td', { class: restarts > 0 ? 'num warn' : 'num' }, fmtInt(restarts)),
            h('td', { class: 'num' }, fmtInt(list.reduce((n, s) => n + (Number(s.trials) || 0), 0))),
          );
        }),
      ),
    ),
  );
}

/**
 * What needs attention among the daemons sharing the database: [{name, what}]
 * for one that refuses to write, one lost (its heartbeat stopped without a
 * drain: its jobs are taken over once their leases run out), and one whose
 * shared settings or schema version differ from a live daemon's.
 */
export function fleetIssues(daemons) {
  const out = [];
  for (const x of Array.isArray(daemons) ? daemons : []) {
    const name = String(x.name);
    if (x.state === 'refused') out.push({ name, what: `refuses to write: ${x.note || 'its schema is older than the database\'s'}` });
    else if (!x.alive && x.state !== 'stopped') out.push({ name, what: 'lost: no heartbeat; its jobs are taken over when their leases run out' });
    if (x.alive && Array.isArray(x.config_differs_from) && x.config_differs_from.length) out.push({ name, what: `settings differ from ${x.config_differs_from.join(', ')}` });
    if (x.alive && Array.isArray(x.schema_differs_from) && x.schema_differs_from.length) out.push({ name, what: `schema ${x.schema_version} differs from ${x.schema_differs_from.join(', ')}` });
  }
  return out;
}

const DAEMON_TONES = { running: 'good', draining: 'warn', stopped: 'neutral', refused: 'bad' };

function daemonsTable(daemons) {
  if (!Array.isArray(daemons) || !daemons.length) return h('p', { class: 'muted' }, 'No daemon has written a heartbeat yet.');
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: 'data daemons' },
      h('caption', { class: 'sr-only' }, 'Daemons sharing this database'),
      h('thead', null, h('tr', null, ['Daemon', 'Version', 'Schema', 'Slots', 'State', 'Jobs', 'Last seen', 'Differs'].map((t, i) => h('th', { scope: 'col', class: i === 5 ? 'num' : null }, t)))),
      h(
        'tbody',
        null,
        daemons.map((x) => {
          const differs = [...(x.config_differs_from || []).map((n) => `settings from ${n}`), ...(x.schema_differs_from || []).map((n) => `schema from ${n}`)];
          const state = x.alive || x.state === 'stopped' || x.state === 'refused' ? String(x.state) : 'lost';
          return h(
            'tr',
            null,
            h('th', { scope: 'row' }, x.url ? h('a', { href: String(x.url) }, String(x.name)) : String(x.name), x.self ? h('span', { class: 'muted' }, ' (this one)') : null),
            h('td', null, String(x.version || '?')),
            h('td', null, String(x.schema_version ?? '?')),
            h('td', null, `${fmtInt(x.gpu_slots)} GPU · ${fmtInt(x.host_slots)} host`, x.slots ? h('div', { class: 'muted' }, String(x.slots)) : null),
            h('td', null, pill(state, state === 'lost' ? 'bad' : DAEMON_TONES[state] || 'neutral', x.note || undefined)),
            h('td', { class: 'num' }, fmtInt(x.jobs_running)),
            h('td', null, timeEl(x.last_seen)),
            h('td', { class: differs.length ? 'warn' : null }, differs.length ? differs.join(' · ') : h('span', { class: 'muted' }, 'agrees')),
          );
        }),
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
    const slots = Array.isArray(d.slots) ? d.slots : [];
    const busy = slots.filter((s) => s.state !== 'idle' && s.state !== 'stopped').length;
    const gpus = byDevice(slots).filter((x) => x.gpu >= 0);
    const runners = slots.filter((s) => Number(s.runner_pid) > 0).length;
    const restarts = slots.reduce((n, s) => n + (Number(s.restarts) || 0), 0);
    const depth = queueDepth(d.queue);
    const issues = fleetIssues(d.daemons);
    const daemons = Array.isArray(d.daemons) ? d.daemons : [];
    const alive = daemons.filter((x) => x.alive).length;
    return h(
      'section',
      { class: 'view view-health' },
      h(
        'div',
        { class: 'view-head' },
        heading('Health', pill(ok ? 'ok' : String(d.status || 'unknown'), ok ? 'good' : 'bad')),
        h('p', { class: 'subtitle' }, `numwatchd ${d.version || '?'} on ${d.node || '?'} · up ${fmtSeconds(d.uptime_s)}`, d.draining ? [' · ', pill('draining: finishing work before exit', 'warn')] : null),
      ),
      d.read_only ? notice('error', 'This daemon refuses to write.', String(d.read_only)) : ok ? null : notice('error', 'The daemon reports a problem.', dbOk ? 'See the cards below.' : 'The database is unavailable: results are not being stored or served.'),
      issues.length ? notice('warn', 'Daemons sharing this database need attention.', h('ul', null, issues.map((i) => h('li', null, `${i.name}: ${i.what}`)))) : null,
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
        card(
          'Build',
          d.identity_warning ? 'warn' : d.building ? 'busy' : 'neutral',
          d.building ? h('span', null, 'building ', commitLink(String(d.building))) : 'idle',
          d.identity_warning ? h('div', { class: 'error-inline' }, String(d.identity_warning)) : null,
        ),
        card('Slots', busy ? 'good' : 'neutral', `${busy} of ${slots.length} busy`),
        card('GPUs', gpus.length ? 'good' : 'neutral', gpus.length ? `${gpus.length} GPU${gpus.length === 1 ? '' : 's'}` : 'none', gpus.length ? gpus.map((g) => `GPU ${g.gpu}: ${g.slots.length} slot${g.slots.length === 1 ? '' : 's'}`).join(' · ') : 'host slots only: checks run on the CPU'),
        card('Runners', restarts ? 'warn' : runners ? 'good' : 'neutral', `${runners} of ${slots.length} running`, `${fmtInt(restarts)} restart${restarts === 1 ? '' : 's'} after a crash, timeout or fault`),
        card('Queue depth', depth.queued ? 'busy' : 'neutral', `${fmtInt(depth.queued)} queued · ${fmtInt(depth.running)} running`, d.queue ? 'jobs of every daemon on this database' : 'unknown: the database does not answer'),
        card('Daemons', issues.length ? 'warn' : 'good', `${alive} of ${daemons.length} alive`, 'sharing this database'),
      ),
      h('section', { 'aria-labelledby': 'daemons-h' }, h('h2', { id: 'daemons-h' }, 'Daemons sharing this database'), daemonsTable(d.daemons)),
      h('section', { 'aria-labelledby': 'devices-h' }, h('h2', { id: 'devices-h' }, 'GPUs and runners'), devicesTable(slots)),
      h('section', { 'aria-labelledby': 'slots-h' }, h('h2', { id: 'slots-h' }, 'Runner slots'), slotsTable(d.slots)),
      h('section', { 'aria-labelledby': 'queue-h' }, h('h2', { id: 'queue-h' }, 'Queue'), queueTable(d.queue)),
      h('details', { class: 'raw', dataset: { key: 'raw-health' } }, h('summary', null, 'Raw health answer'), h('pre', null, JSON.stringify(d, null, 2))),
    );
  },
};
