// Charts with uPlot (npm package `uplot`, pinned in web/package.json, served
// by numwatchd from /node_modules/). It is loaded on first use with a dynamic
// import, so the other views never wait for it and still work when
// node_modules is missing (the chart then says how to install it).
import { h } from './dom.js';

const UPLOT_JS = '/node_modules/uplot/dist/uPlot.esm.js';
const UPLOT_CSS = '/node_modules/uplot/dist/uPlot.min.css';

let loading = null;

/** Resolves to the uPlot constructor; rejects with a message that says how to install it. */
export function loadUPlot() {
  if (!loading) {
    if (!document.querySelector('link[data-uplot]')) {
      document.head.appendChild(h('link', { rel: 'stylesheet', href: UPLOT_CSS, dataset: { uplot: '1' } }));
    }
    loading = import(UPLOT_JS).then(
      (m) => m.default,
      (e) => {
        loading = null;
        throw new Error(`cannot load the chart library ${UPLOT_JS} (${e && e.message ? e.message : e}); install it with 'npm ci' in web/ (scripts/demo and scripts/test do)`);
      },
    );
  }
  return loading;
}

/** Colours of the current scheme, from the CSS variables of style.css. */
export function themeColors() {
  const cs = getComputedStyle(document.documentElement);
  const v = (name, dflt) => (cs.getPropertyValue(name) || '').trim() || dflt;
  return {
    fg: v('--fg', '#1f2933'),
    muted: v('--fg-muted', '#5f6b7a'),
    grid: v('--border', '#d9dee5'),
    bg: v('--bg', '#ffffff'),
    regressed: v('--v-regressed', '#d62828'),
    improved: v('--v-improved', '#1c6fd1'),
    worst: v('--chart-worst', '#1f2933'),
    median: v('--chart-median', '#1c6fd1'),
    rate: v('--chart-rate', '#b86200'),
    culprit: v('--chart-culprit', '#8e3bb0'),
    budget: v('--fg-muted', '#5f6b7a'),
  };
}

/**
 * A uPlot plugin that draws a dashed vertical line at each marker's x with a
 * label on top ("culprit #3"): markers = [{x, label}].
 */
export function markerPlugin(markers, color, bg = '#ffffff') {
  return {
    hooks: {
      draw: [
        (u) => {
          const { ctx } = u;
          const top = u.bbox.top;
          const bottom = u.bbox.top + u.bbox.height;
          ctx.save();
          ctx.strokeStyle = color;
          ctx.fillStyle = color;
          ctx.lineWidth = 2 * devicePixelRatio;
          ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
          ctx.font = `${600} ${11 * devicePixelRatio}px system-ui, sans-serif`;
          ctx.textBaseline = 'top';
          ctx.textAlign = 'left';
          for (const m of markers) {
            const x = Math.round(u.valToPos(m.x, 'x', true));
            if (!(x >= u.bbox.left - 1 && x <= u.bbox.left + u.bbox.width + 1)) continue;
            ctx.beginPath();
            ctx.moveTo(x, top);
            ctx.lineTo(x, bottom);
            ctx.stroke();
            if (m.label) {
              const pad = 3 * devicePixelRatio;
              const w = ctx.measureText(m.label).width;
              const tx = x + 2 * pad + w > u.bbox.left + u.bbox.width ? x - 2 * pad - w : x + 2 * pad;
              ctx.save();
              ctx.fillStyle = bg;
              ctx.globalAlpha = 0.85;
              ctx.fillRect(tx - pad, top, w + 2 * pad, 15 * devicePixelRatio);
              ctx.restore();
              ctx.fillText(m.label, tx, top + 2 * devicePixelRatio);
            }
          }
          ctx.restore();
        },
      ],
    },
  };
}

/**
 * Mounts a chart in `box` once uPlot is loaded: make(uPlot, width) returns
 * [opts, data]. The chart follows the box's width. Resolves to the instance;
 * on failure, puts a notice in the box and resolves to null.
 */
export async function mountChart(box, make) {
  let uPlot;
  try {
    uPlot = await loadUPlot();
  } catch (e) {
    box.replaceChildren(h('div', { class: 'notice notice-error', role: 'alert' }, h('strong', null, 'No chart.'), h('div', null, String(e.message))));
    box.dataset.state = 'error';
    return null;
  }
  if (!box.isConnected) return null;
  const width = Math.max(280, box.clientWidth || 800);
  const [opts, data] = make(uPlot, width);
  box.replaceChildren();
  const chart = new uPlot({ ...opts, width }, data, box);
  box.dataset.state = 'ready';
  if (typeof ResizeObserver === 'function') {
    let last = width;
    const ro = new ResizeObserver(() => {
      if (!box.isConnected) {
        ro.disconnect();
        chart.destroy();
        return;
      }
      const w = Math.max(280, box.clientWidth);
      if (Math.abs(w - last) > 2) {
        last = w;
        chart.setSize({ width: w, height: opts.height });
      }
    });
    ro.observe(box);
  }
  return chart;
}
