// The commits view (default): a commit x (check, dtype) grid of verdicts.
//   /            page 1, newest first
//   /?page=N     page N (PAGE_SIZE commits a page)
// Column headers link to the check pages (/?view=check&check=C[&dtype=D]).
import { getJSON } from '../api.js';
import { h, srOnly } from '../dom.js';
import { badge, commitLink, heading, legend, notice, timeEl } from '../components.js';
import { cellNote, cellVerdict, isSha, parsePage, url, verdictClass, verdictInfo } from '../format.js';

export const PAGE_SIZE = 50;

/** The grid's columns: one per (check, dtype), in the API's check order. */
export function columns(checks) {
  const cols = [];
  for (const c of checks || []) {
    const dtypes = Array.isArray(c.dtypes) && c.dtypes.length ? c.dtypes : [''];
    for (const d of dtypes) cols.push({ check: String(c.check), dtype: String(d), key: d ? `${c.check}/${d}` : String(c.check) });
  }
  return cols;
}

function pager(page, pages, total) {
  const first = total ? (page - 1) * PAGE_SIZE + 1 : 0;
  const last = Math.min(total, page * PAGE_SIZE);
  const newer = page > 1 ? h('a', { href: url.commits(page - 1), rel: 'prev', class: 'btn' }, '‹ Newer') : h('span', { class: 'btn disabled', 'aria-disabled': 'true' }, '‹ Newer');
  const older = page < pages ? h('a', { href: url.commits(page + 1), rel: 'next', class: 'btn' }, 'Older ›') : h('span', { class: 'btn disabled', 'aria-disabled': 'true' }, 'Older ›');
  return h(
    'nav',
    { class: 'pager', 'aria-label': 'Pages' },
    newer,
    h('span', { class: 'pager-pos' }, total ? `${first}–${last} of ${total}` : '0 commits', pages > 1 ? ` · page ${page} of ${pages}` : ''),
    older,
  );
}

function headerRows(cols, checks) {
  const top = h(
    'tr',
    { class: 'h-checks' },
    h('th', { class: 'corner', rowspan: '2', scope: 'col' }, h('span', { class: 'corner-hint' }, 'Columns: check · dtype', h('br'), '~ non-deterministic check'), h('span', { class: 'corner-label' }, 'Commit, newest first')),
  );
  const bottom = h('tr', { class: 'h-dtypes' });
  for (const c of checks || []) {
    const dtypes = Array.isArray(c.dtypes) && c.dtypes.length ? c.dtypes : [''];
    const det = c.deterministic === false ? ' (non-deterministic: judged statistically)' : '';
    top.appendChild(
      h(
        'th',
        { class: 'check', colspan: String(dtypes.length), scope: 'colgroup', title: `${c.check}${det}: history across commits` },
        h('a', { href: url.check(c.check), class: 'check-link' }, h('span', { class: 'check-name' }, c.deterministic === false ? `${c.check} ~` : String(c.check))),
      ),
    );
    dtypes.forEach((d, i) =>
      bottom.appendChild(h('th', { class: i === 0 ? 'dtype first' : 'dtype', scope: 'col', title: `${c.check} ${d}: history across commits` }, d ? h('a', { href: url.check(c.check, d), class: 'dtype-link' }, String(d)) : '')),
    );
  }
  return [top, bottom];
}

function row(commit, cols, index) {
  const sha = isSha(commit.sha) ? commit.sha : null;
  const title = commit.title == null ? '' : String(commit.title);
  const tr = h('tr', { dataset: sha ? { href: url.commit(sha) } : null });
  tr.appendChild(
    h(
      'th',
      { scope: 'row', class: 'commit' },
      h(
        'div',
        { class: 'c-line1', dataset: { v: String(commit.verdict) } },
        badge(commit.verdict),
        sha ? h('a', { href: url.commit(sha), class: 'sha', dataset: { k: `row-${sha}`, col: '0', row: String(index) } }, sha.slice(0, 8)) : h('span', { class: 'sha' }, '?'),
        h('span', { class: 'c-title', title }, title),
      ),
      h('div', { class: 'c-line2' }, h('span', { class: 'c-author', title: commit.email ? `${commit.author} <${commit.email}>` : null }, commit.author == null ? '' : String(commit.author)), ' · ', timeEl(commit.committed_at)),
    ),
  );
  let prevCheck = null;
  cols.forEach((col, i) => {
    const v = cellVerdict(commit, col.key);
    const info = verdictInfo(v);
    const label = cellLabel(col, info, cellNote(commit, col.key));
    const td = h('td', { class: col.check !== prevCheck ? 'cell-td first' : 'cell-td' });
    prevCheck = col.check;
    td.appendChild(
      sha
        ? h('a', { class: `cell ${verdictClass(v)}`, href: url.commit(sha, col.check, col.dtype), tabindex: '-1', 'aria-label': label, title: `${label} — ${sha.slice(0, 8)} ${title}`, dataset: { col: String(i + 1), row: String(index), v: String(v) } }, info.glyph)
        : h('span', { class: `cell ${verdictClass(v)}`, title: label }, info.glyph, srOnly(label)),
    );
    tr.appendChild(td);
  });
  return tr;
}

/** A cell's words: check, dtype, verdict, and what it says of regressions and rates. */
function cellLabel(col, info, note) {
  return `${col.check} ${col.dtype}: ${info.label}${note ? ` (${note})` : ''}`;
}

/** Arrow keys move between the grid's links (cells are not in the Tab order; rows' shas are). */
function onGridKey(e) {
  const keys = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0], Home: [0, -Infinity], End: [0, Infinity] };
  const move = keys[e.key];
  const a = e.target.closest && e.target.closest('a[data-col]');
  if (!move || !a || e.altKey || e.ctrlKey || e.metaKey) return;
  const table = e.currentTarget;
  const row = Number(a.dataset.row) + move[0];
  const rowEl = table.querySelector(`a[data-row="${row}"][data-col="0"]`);
  if (!rowEl) return;
  const tr = rowEl.closest('tr');
  const links = tr.querySelectorAll('a[data-col]');
  let col = Number(a.dataset.col) + move[1];
  col = Math.max(0, Math.min(links.length - 1, col));
  const target = links[col];
  if (target) {
    e.preventDefault();
    target.focus();
    target.scrollIntoView({ block: 'nearest', inline: 'nearest' });
  }
}

/** A click anywhere on a row (outside a link) opens the commit. */
function onGridClick(e) {
  if (e.button !== 0 || e.target.closest('a, button')) return;
  const tr = e.target.closest('tr[data-href]');
  if (!tr) return;
  if (e.ctrlKey || e.metaKey || e.shiftKey) {
    window.open(tr.dataset.href, '_blank', 'noopener');
    return;
  }
  const sel = window.getSelection();
  if (sel && !sel.isCollapsed) return; // the user is selecting text
  e.preventDefault();
  window.dispatchEvent(new CustomEvent('nw:navigate', { detail: tr.dataset.href }));
}

/** A line under the legend: what new and open regressions look like, and where they are listed. */
function regressionsNote() {
  return h(
    'p',
    { class: 'grid-note small muted' },
    'Solid red ✕: a regression new at that commit. Hatched ⋯: the commit still shows a regression an earlier commit brought in. ',
    h('a', { href: url.regressions({ state: 'active' }) }, 'Open regressions'),
    ' · ',
    h('a', { href: url.regressions() }, 'all regressions'),
  );
}

/** What each rendered grid shows, so that a refresh can patch it in place. */
const shown = new WeakMap();

function tableLabel(commits) {
  const counts = {};
  for (const c of commits) counts[verdictInfo(c.verdict).key] = (counts[verdictInfo(c.verdict).key] || 0) + 1;
  const summary = Object.entries(counts)
    .map(([k, n]) => `${n} ${verdictInfo(k).label}`)
    .join(', ');
  return `Verdicts of ${commits.length} commits (${summary}), newest first`;
}

/**
 * Patches the grid on screen with fresh data when it shows the same commits
 * and columns (the usual auto-refresh: verdicts arrive). Only changed cells
 * are touched, so scrolling, focus and hover stay as they are and a refresh
 * of a 50 x 150 grid costs next to nothing. False: render anew.
 */
function update(root, data, params) {
  const table = root.querySelector('table.grid');
  const was = table && shown.get(table);
  const commits = Array.isArray(data.commits) ? data.commits : [];
  if (!was || was.page !== parsePage(params.get('page')) || was.total !== (Number(data.total) || 0)) return false;
  const cols = columns(data.checks);
  if (was.cols !== cols.map((c) => c.key).join('\n') || was.rows !== commits.map((c) => c.sha).join(',')) return false;
  const rows = table.tBodies[0].rows;
  commits.forEach((commit, i) => {
    const tr = rows[i];
    const line1 = tr.querySelector('.c-line1');
    if (line1.dataset.v !== String(commit.verdict)) {
      line1.dataset.v = String(commit.verdict);
      line1.replaceChild(badge(commit.verdict), line1.querySelector('.badge'));
    }
    const links = tr.querySelectorAll('a.cell');
    cols.forEach((col, j) => {
      const a = links[j];
      const v = cellVerdict(commit, col.key);
      const info = verdictInfo(v);
      const label = cellLabel(col, info, cellNote(commit, col.key));
      if (!a || (a.dataset.v === String(v) && a.getAttribute('aria-label') === label)) return;
      a.dataset.v = String(v);
      a.className = `cell ${verdictClass(v)}`;
      a.textContent = info.glyph;
      a.setAttribute('aria-label', label);
      a.title = `${label} — ${commit.sha.slice(0, 8)} ${commit.title == null ? '' : commit.title}`;
    });
  });
  table.setAttribute('aria-label', tableLabel(commits));
  return true;
}

export default {
  name: 'commits',
  nav: 'commits',

  async load(params, { signal }) {
    const page = parsePage(params.get('page'));
    const r = await getJSON(`/api/v1/commits?limit=${PAGE_SIZE}&offset=${(page - 1) * PAGE_SIZE}`, { signal });
    return { data: r.body, sig: r.text };
  },

  title(params) {
    const page = parsePage(params.get('page'));
    return page > 1 ? `Commits, page ${page}` : 'Commits';
  },

  update,

  render(data, params) {
    const page = parsePage(params.get('page'));
    const total = Number(data.total) || 0;
    const pages = Math.max(1, Math.ceil(total / PAGE_SIZE));
    const commits = Array.isArray(data.commits) ? data.commits : [];
    const cols = columns(data.checks);

    const top = h(
      'div',
      { class: 'view-head' },
      heading('Commits', h('span', { class: 'subtitle' }, `${cols.length} check × dtype column${cols.length === 1 ? '' : 's'}`)),
      pager(page, pages, total),
    );
    const parts = [top, legend(), regressionsNote()];

    if (!total) {
      parts.push(notice('info', 'No commits yet.', 'The daemon imports the branch’s history on its first poll. See ', h('a', { href: url.health() }, 'Health'), ' for polling errors.'));
      return h('section', { class: 'view view-commits' }, parts);
    }
    if (!commits.length) {
      parts.push(notice('info', `There is no page ${page}.`, `${total} commits make ${pages} page${pages === 1 ? '' : 's'}. `, h('a', { href: url.commits(1) }, 'Go to the newest commits.')));
      return h('section', { class: 'view view-commits' }, parts);
    }
    if (!cols.length) {
      parts.push(notice('info', 'No checks known yet.', 'Checks appear once a commit has been built and its runner has listed them.'));
    }

    const table = h(
      'table',
      { class: 'grid', style: `--ncols: ${cols.length}`, 'aria-label': tableLabel(commits), onkeydown: onGridKey, onclick: onGridClick },
      h('colgroup', null, h('col', { class: 'col-commit' }), cols.map(() => h('col', { class: 'col-cell' }))),
      h('thead', null, headerRows(cols, data.checks)),
      h(
        'tbody',
        null,
        commits.map((c, i) => row(c, cols, i)),
      ),
    );
    shown.set(table, { page, total, cols: cols.map((c) => c.key).join('\n'), rows: commits.map((c) => c.sha).join(',') });
    parts.push(h('div', { class: 'grid-wrap', dataset: { scrollKey: 'grid' }, tabindex: '0', role: 'region', 'aria-label': 'Verdict grid (arrow keys move between cells)' }, table));
    if (pages > 1) parts.push(h('div', { class: 'view-foot' }, pager(page, pages, total)));
    return h('section', { class: 'view view-commits' }, parts);
  },
};
