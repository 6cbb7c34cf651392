// DOM helpers. Every string from the API reaches the page as a text node or an
// attribute value set with setAttribute: nothing is ever parsed as HTML, so
// nothing needs escaping and nothing can inject markup. Keep it that way: no
// HTML-parsing DOM sinks in this app (tests/integration/web_dashboard.sh
// greps for them).

/**
 * h('a', {href: '/x', class: 'sha'}, 'text', child, [more, children])
 * Attributes: null/undefined/false are skipped, true sets an empty attribute;
 * `class` sets className; `dataset` is an object of data-* values; `on<event>`
 * adds a listener. Children: Nodes, strings/numbers (text), arrays, null (skipped).
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const key of Object.keys(attrs)) {
      const v = attrs[key];
      if (v == null || v === false) continue;
      if (key === 'class') el.className = v;
      else if (key === 'dataset') Object.assign(el.dataset, v);
      else if (key.startsWith('on') && typeof v === 'function') el.addEventListener(key.slice(2), v);
      else el.setAttribute(key, v === true ? '' : String(v));
    }
  }
  appendChildren(el, children);
  return el;
}

export function appendChildren(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) appendChildren(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
}

/** A DocumentFragment of the given children. */
export function frag(...children) {
  return appendChildren(document.createDocumentFragment(), children);
}

/** Text only visible to screen readers. */
export function srOnly(text) {
  return h('span', { class: 'sr-only' }, text);
}

/**
 * Copies text to the clipboard. navigator.clipboard needs a secure context
 * (https or localhost); elsewhere fall back to selecting a temporary textarea.
 */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      /* fall through */
    }
  }
  const ta = h('textarea', { class: 'sr-only', readonly: true, 'aria-hidden': 'true' });
  ta.value = text;
  document.body.appendChild(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch {
    ok = false;
  }
  ta.remove();
  return ok;
}

/** A <code> block with a Copy button (for repro commands, shas). */
export function copyable(text, { label = 'Copy', block = true } = {}) {
  const code = h('code', { class: 'copy-text' }, text);
  const status = h('span', { class: 'copy-status', role: 'status', 'aria-live': 'polite' });
  const button = h(
    'button',
    {
      type: 'button',
      class: 'copy-btn',
      'aria-label': `${label}: ${text}`,
      onclick: async () => {
        const ok = await copyText(text);
        status.textContent = ok ? 'Copied' : 'Select and copy by hand';
        if (!ok) {
          const range = document.createRange();
          range.selectNodeContents(code);
          const sel = window.getSelection();
          sel.removeAllRanges();
          sel.addRange(range);
        }
        setTimeout(() => {
          status.textContent = '';
        }, 2000);
      },
    },
    label,
  );
  return h(block ? 'div' : 'span', { class: block ? 'copyable block' : 'copyable' }, code, button, status);
}
