// The bisection view: one bisection's outcome (the culprit, with the
// bisector's confidence), its range with each commit's probability of being
// the culprit (a bar per commit; commits that do not build or leave the binary
// unchanged are flagged), its probes and its log.
//   /?view=bisection&id=N
import { ApiError, getJSON } from '../api.js';
import { copyable, h } from '../dom.js';
import { buildPill, commitLink, facts, heading, notice, pill, timeEl } from '../components.js';
import { FLAG_SAME_BINARY, FLAG_UNBUILDABLE, absTime, flagWords, fmtInt, fmtPercent, fmtSeconds, foldRange, isBisectionId, isId, isSha, outcomeInfo, parseTime, shortSha, url } from '../format.js';

/** Ranges longer than this show only the commits worth reading, the rest folded. */
const RANGE_MAX = 300;
/** Folded away in a long range: commits below this probability, unprobed and unflagged. */
const P_MIN = 0.001;

/** What the bad commit's reruns said of its failing seeds (posterior.seeds), in words. */
function seedsNote(post) {
  const words = {
    seed_bound: ' · seed-bound: they fail again every time, so they are replayed first',
    race: ' · a race: they fail again only as often as any seed, so fresh seeds are used',
    unsure: ' · not judged yet either way: replayed, their rate learnt',
  };
  return post && words[post.seeds] ? h('span', { class: 'muted' }, words[post.seeds]) : null;
}

/** Per commit of the range: probability, flags (posterior's, else derived from builds) and probes. */
export function rangeRows(b) {
  const range = Array.isArray(b.range) ? b.range : [];
  const post = b.posterior && Array.isArray(b.posterior.commits) ? b.posterior.commits : [];
  const pBySha = new Map(post.map((c) => [c.sha, c]));
  const probes = Array.isArray(b.probes) ? b.probes : [];
  const probesBySha = new Map();
  for (const p of probes) {
    if (!probesBySha.has(p.commit)) probesBySha.set(p.commit, []);
    probesBySha.get(p.commit).push(p);
  }
  let prevHash = null;
  return range.map((r, i) => {
    const pc = pBySha.get(r.sha);
    let flags = pc && pc.flags != null ? Number(pc.flags) : 0;
    if (!pc) {
      if (r.build != null && r.build !== 'ok') flags |= FLAG_UNBUILDABLE;
      if (i > 0 && r.runner_hash && r.runner_hash === prevHash) flags |= FLAG_SAME_BINARY;
    }
    prevHash = r.runner_hash || null;
    const ps = probesBySha.get(r.sha) || [];
    return {
      ...r,
      p: pc && pc.p != null ? Number(pc.p) : null,
      flags,
      probes: ps.length,
      trials: ps.reduce((n, p) => n + (Number(p.trials) || 0), 0),
      failures: ps.reduce((n, p) => n + (Number(p.failures) || 0), 0),
    };
  });
}

function bar(p, { tone = '' } = {}) {
  const v = p == null || !Number.isFinite(p) ? 0 : Math.max(0, Math.min(1, p));
  return h(
    'div',
    { class: `pbar ${tone}`.trim(), role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': '1', 'aria-valuenow': String(v), 'aria-valuetext': fmtPercent(p) },
    h('div', { class: 'pbar-fill', style: `width: ${(v * 100).toFixed(2)}%` }),
    h('span', { class: 'pbar-text' }, p == null ? '—' : fmtPercent(p)),
  );
}

function outcomePanel(b) {
  const o = outcomeInfo(b.outcome, b.state);
  const post = b.posterior && typeof b.posterior === 'object' ? b.posterior : {};
  let body;
  if (b.outcome === 'culprit' && isSha(b.culprit)) {
    body = [
      h(
        'p',
        { class: 'outcome-line' },
        h('span', { class: 'outcome-label' }, 'Culprit '),
        commitLink(b.culprit, { check: b.check, dtype: b.dtype, cls: 'sha culprit-sha', n: 12 }),
        ' ',
        h('strong', { class: 'culprit-title' }, b.culprit_title == null ? '' : String(b.culprit_title)),
        b.culprit_author ? h('span', { class: 'muted' }, ` by ${b.culprit_author}`) : null,
      ),
      h('p', { class: 'confidence' }, 'Confidence ', h('strong', null, fmtPercent(b.confidence, 2)), bar(b.confidence == null ? null : Number(b.confidence), { tone: 'pbar-culprit' })),
      copyable(String(b.culprit), { label: 'Copy sha', block: false }),
    ];
  } else if (b.outcome === 'no_culprit') {
    body = [h('p', { class: 'outcome-line' }, 'No commit is to blame: the first failure was a flake, not a regression.'), post.none != null ? h('p', { class: 'muted' }, `Probability of no culprit: ${fmtPercent(post.none, 2)}`) : null];
  } else if (b.outcome === 'withdrawn') {
    body = [h('p', { class: 'outcome-line' }, 'The culprit the search found failed its confirmation with fresh seeds, so none is reported.'), isSha(b.culprit) ? h('p', null, 'Withdrawn: ', commitLink(b.culprit, { n: 12 })) : null];
  } else if (b.outcome === 'error') {
    body = [h('p', { class: 'outcome-line' }, 'The bisection stopped with an error; see its log below.')];
  } else {
    const lead = Array.isArray(post.commits) && post.commits.length ? [...post.commits].sort((x, y) => Number(y.p) - Number(x.p))[0] : null;
    body = [
      h('p', { class: 'outcome-line' }, b.state === 'confirming' ? 'Re-testing the candidate and its parent with fresh seeds.' : 'Probing commits of the range; this page refreshes by itself.'),
      post.status ? h('p', { class: 'muted' }, `Bisector: ${post.status}`) : null,
      lead && isSha(lead.sha) ? h('p', null, 'Leading candidate ', commitLink(lead.sha, { n: 12 }), ` at ${fmtPercent(lead.p, 2)}`) : null,
    ];
  }
  return h('section', { class: `panel outcome outcome-${o.tone}`, id: 'outcome', 'aria-labelledby': 'outcome-h' }, h('h2', { id: 'outcome-h' }, 'Outcome ', pill(o.label, o.tone)), body);
}

function rangeTable(b, rows, showAll, id) {
  const culprit = b.outcome === 'culprit' ? b.culprit : null;
  const keep = (r) => r.sha === culprit || r.sha === b.bad || r.probes > 0 || r.flags !== 0 || (r.p != null && r.p >= P_MIN);
  const items = showAll ? rows.map((r) => ({ row: r })) : foldRange(rows, keep, { max: RANGE_MAX });
  const folded = items.some((x) => x.gap);
  const post = b.posterior && typeof b.posterior === 'object' ? b.posterior : {};
  const trs = [];
  if (isSha(b.good)) {
    trs.push(h('tr', { class: 'good-row' }, h('td', { class: 'num' }, '—'), h('th', { scope: 'row' }, commitLink(b.good)), h('td', { class: 'muted' }, 'last clean commit (the range starts after it)'), h('td', null), h('td', null), h('td', null), h('td', null), h('td', { class: 'notes' }, pill('last clean', 'good'))));
  }
  for (const it of items) {
    if (it.gap) {
      trs.push(h('tr', { class: 'gap-row' }, h('td', { colspan: '8' }, `… ${fmtInt(it.gap)} commit${it.gap === 1 ? '' : 's'} below ${fmtPercent(P_MIN)}, not probed …`)));
      continue;
    }
    const r = it.row;
    const isCulprit = r.sha === culprit;
    const notes = flagWords(r.flags).map((w) => pill(w, 'neutral', r.flags & FLAG_UNBUILDABLE ? 'never blamed: it does not build' : 'cannot be the culprit: its runner is the same binary as its parent\u2019s'));
    if (isCulprit) notes.unshift(pill('culprit', 'bad'));
    if (r.sha === b.bad) notes.push(pill('regressed here', 'warn'));
    trs.push(
      h(
        'tr',
        { class: [isCulprit ? 'culprit-row' : '', r.flags ? 'flagged' : ''].join(' ').trim() || null, dataset: { sha: String(r.sha) } },
        h('td', { class: 'num' }, r.position == null ? '—' : `#${r.position}`),
        h('th', { scope: 'row' }, commitLink(r.sha, { check: b.check, dtype: b.dtype, cls: isCulprit ? 'sha culprit-sha' : 'sha' })),
        h('td', { class: 'title-cell', title: r.title == null ? null : String(r.title) }, r.title == null ? '' : String(r.title), r.author ? h('span', { class: 'muted' }, ` · ${r.author}`) : null),
        h('td', { class: 'pcell' }, r.flags & (FLAG_UNBUILDABLE | FLAG_SAME_BINARY) && !r.p ? bar(0, { tone: 'pbar-off' }) : bar(r.p, { tone: isCulprit ? 'pbar-culprit' : '' })),
        h('td', { class: 'num' }, r.probes ? `${fmtInt(r.failures)}/${fmtInt(r.trials)}` : h('span', { class: 'muted' }, '—')),
        h('td', null, buildPill(r.build)),
        h('td', null, r.runner_hash ? h('code', { title: String(r.runner_hash) }, shortSha(String(r.runner_hash), 10)) : '—'),
        h('td', { class: 'notes' }, notes),
      ),
    );
  }
  if (post.none != null) {
    trs.push(h('tr', { class: 'none-row' }, h('td', null), h('th', { scope: 'row' }, h('span', { class: 'muted' }, 'none')), h('td', { class: 'muted' }, 'no culprit: the first signal was a flake'), h('td', { class: 'pcell' }, bar(Number(post.none), { tone: 'pbar-none' })), h('td', null), h('td', null), h('td', null), h('td', null)));
  }
  return h(
    'section',
    { 'aria-labelledby': 'range-h' },
    h(
      'div',
      { class: 'section-head' },
      h('h2', { id: 'range-h' }, `Range: ${fmtInt(rows.length)} commit${rows.length === 1 ? '' : 's'}, oldest first`),
      folded ? h('a', { href: `${url.bisection(id)}&range=all#range-h`, 'data-keep-scroll': true }, 'show every commit') : showAll && rows.length > RANGE_MAX ? h('a', { href: url.bisection(id) + '#range-h', 'data-keep-scroll': true }, 'fold unlikely commits') : null,
    ),
    h('p', { class: 'muted small' }, 'Bar: the probability that the commit is the culprit, as the bisector has it now. Probes: failing / run trials at that commit.'),
    h(
      'div',
      { class: 'table-wrap', dataset: { scrollKey: 'range' } },
      h(
        'table',
        { class: 'data range' },
        h('caption', { class: 'sr-only' }, 'Commits of the range with the probability of each being the culprit'),
        h('thead', null, h('tr', null, ['Pos.', 'Commit', 'Title', 'P(culprit)', 'Probes', 'Build', 'Runner', 'Notes'].map((t, i) => h('th', { scope: 'col', class: i === 0 || i === 4 ? 'num' : null }, t)))),
        h('tbody', null, trs),
      ),
    ),
  );
}

function probesTable(b) {
  const probes = Array.isArray(b.probes) ? [...b.probes] : [];
  if (!probes.length) return h('section', { 'aria-labelledby': 'probes-h' }, h('h2', { id: 'probes-h' }, 'Probes'), h('p', { class: 'muted' }, 'No probe yet.'));
  probes.sort((x, y) => Number(x.round) - Number(y.round) || Number(x.id) - Number(y.id));
  const inRange = new Map((Array.isArray(b.range) ? b.range : []).map((r) => [r.sha, r]));
  return h(
    'section',
    { 'aria-labelledby': 'probes-h' },
    h('h2', { id: 'probes-h' }, `Probes (${probes.length})`),
    h(
      'div',
      { class: 'table-wrap', dataset: { scrollKey: 'probes' } },
      h(
        'table',
        { class: 'data probes' },
        h('caption', { class: 'sr-only' }, 'Probes of the bisection'),
        h('thead', null, h('tr', null, ['Probe', 'Round', 'Purpose', 'Commit', 'Seeds', 'Trials', 'Failures', 'Started', 'Took'].map((t, i) => h('th', { scope: 'col', class: [1, 4, 5, 6].includes(i) ? 'num' : null }, t)))),
        h(
          'tbody',
          null,
          probes.map((p) => {
            const r = inRange.get(p.commit);
            const a = parseTime(p.created_at);
            const z = parseTime(p.finished_at);
            return h(
              'tr',
              null,
              h('th', { scope: 'row' }, `#${p.id}`),
              h('td', { class: 'num' }, fmtInt(p.round)),
              h('td', null, pill(String(p.purpose), p.purpose === 'confirm' ? 'busy' : 'neutral')),
              h('td', null, commitLink(p.commit, { check: b.check, dtype: b.dtype }), ' ', h('span', { class: 'muted' }, r ? (r.title == null ? '' : String(r.title)) : p.commit === b.good ? 'the last clean commit' : '')),
              h('td', { class: 'num' }, fmtInt(p.seeds)),
              h('td', { class: 'num' }, p.trials == null ? h('span', { class: 'muted' }, 'running') : fmtInt(p.trials)),
              h('td', { class: Number(p.failures) > 0 ? 'num over' : 'num' }, fmtInt(p.failures)),
              h('td', null, timeEl(p.created_at)),
              h('td', null, a != null && z != null ? fmtSeconds((z - a) / 1000) : '—'),
            );
          }),
        ),
      ),
    ),
  );
}

function logSection(b) {
  const log = Array.isArray(b.log) ? b.log : [];
  return h(
    'section',
    { 'aria-labelledby': 'log-h' },
    h('h2', { id: 'log-h' }, 'Log'),
    log.length
      ? h(
          'ol',
          { class: 'bisect-log', dataset: { scrollKey: 'bisect-log' }, tabindex: '0' },
          log.map((e) => {
            const at = Number(e.at);
            const iso = Number.isFinite(at) && at > 0 ? new Date(at * 1000).toISOString() : null;
            return h('li', null, h('span', { class: 'log-at' }, iso ? absTime(iso) : '—'), h('span', { class: 'log-msg' }, e.msg == null ? '' : String(e.msg)));
          }),
        )
      : h('p', { class: 'muted' }, 'Nothing logged yet.'),
  );
}

export default {
  name: 'bisection',
  nav: 'bisections',

  async load(params, { signal }) {
    const id = (params.get('id') || '').trim();
    if (!isBisectionId(id)) throw new ApiError(id ? `'${id}' is not a bisection id` : 'no bisection given: add &id=<number> to the URL', 400);
    const r = await getJSON(`/api/v1/bisections/${id}`, { signal });
    return { data: r.body, sig: r.text };
  },

  title(params, data) {
    if (data && data.id != null) return `Bisection #${data.id} ${data.check || ''} ${data.dtype || ''}`.trim();
    return `Bisection ${params.get('id') || ''}`.trim();
  },

  render(b, params) {
    const id = String(b.id);
    const rows = rangeRows(b);
    const post = b.posterior && typeof b.posterior === 'object' ? b.posterior : {};
    const a = parseTime(b.created_at);
    const z = parseTime(b.finished_at);
    const head = h(
      'div',
      { class: 'view-head' },
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: url.bisections() }, 'Bisections'), ' › ', h('span', null, `#${id}`)),
      heading(`Bisection #${id}`, h('a', { href: url.check(b.check, b.dtype), class: 'mono head-check' }, `${b.check} · ${b.dtype}`)),
    );
    const about = h(
      'section',
      { class: 'panel', 'aria-label': 'Bisection' },
      facts([
        ['Check', h('a', { href: url.check(b.check, b.dtype), class: 'mono' }, `${b.check} · ${b.dtype}`)],
        ['Regression', isId(b.regression) ? h('a', { href: url.regression(b.regression), class: 'regression-link' }, `Regression #${b.regression}`, h('span', { class: 'muted' }, ' (its state, mail thread and the commits that show it)')) : h('span', { class: 'muted' }, b.requested_by === 'auto' ? '—' : 'none: started by hand')],
        ['Last clean', commitLink(b.good, { n: 12 })],
        ['Regressed at', commitLink(b.bad, { n: 12, check: b.check, dtype: b.dtype })],
        ['Failing seeds', Array.isArray(b.failing_seeds) && b.failing_seeds.length ? h('span', null, h('code', null, b.failing_seeds.join(', ')), seedsNote(post)) : '—'],
        ['Failure rate', post.culprit_rate == null ? '—' : h('span', null, `${fmtPercent(post.culprit_rate)} of fresh seeds`, h('span', { class: 'muted' }, b.outcome === 'culprit' ? ' at the culprit (estimated)' : ' at the leading candidate (estimated)'))],
        ['Flake rate assumed', post.flake_rate == null ? '—' : h('span', null, fmtPercent(post.flake_rate, 2), h('span', { class: 'muted' }, ' (the good side’s)'))],
        ['State', h('span', null, String(b.state), post.status ? h('span', { class: 'muted' }, ` · bisector: ${post.status}`) : null)],
        ['Evidence', `${fmtInt(post.trials)} trials seen${post.withdrawals ? ` · ${fmtInt(post.withdrawals)} culprit${post.withdrawals === 1 ? '' : 's'} withdrawn` : ''}`],
        ['Requested by', b.requested_by == null ? '—' : String(b.requested_by)],
        ['Started', h('span', null, absTime(b.created_at), ' · ', timeEl(b.created_at))],
        ['Finished', b.finished_at ? h('span', null, absTime(b.finished_at), a != null && z != null ? ` (took ${fmtSeconds((z - a) / 1000)})` : '') : h('span', { class: 'muted' }, 'not yet')],
      ]),
    );
    return h(
      'section',
      { class: 'view view-bisection' },
      head,
      h('div', { class: 'panels' }, outcomePanel(b), about),
      rows.length ? rangeTable(b, rows, params.get('range') === 'all', id) : notice('info', 'The range is empty.', 'No commit lies between the last clean commit and the regressed one.'),
      probesTable(b),
      logSection(b),
      h('details', { class: 'raw', dataset: { key: 'raw-bisection' } }, h('summary', null, 'Raw posterior'), h('pre', null, JSON.stringify(b.posterior == null ? null : b.posterior, null, 2))),
    );
  },
};
