// Charts drawn as SVG by hand: bars of rollup buckets (series, a window
// counter's buckets, uniques) and lines of the node's figures. Every bar
// and point carries its exact value in data-tip: a hover readout under
// the chart (attachTips) and the SVG <title> tooltip show it.
import { s, h, replace, fmtNum, cmpNum } from './dom.js';

const W = 900, H = 260, PAD = { left: 64, right: 12, top: 12, bottom: 36 };

export function label(iso, granularity) {
  const d = new Date(iso);
  if (typeof iso !== 'string' || isNaN(d)) return String(iso);
  const t = d.toISOString();
  switch (granularity) {
    case 'second': return t.slice(0, 19).replace('T', ' ');
    case 'minute': case 'hour': return t.slice(0, 16).replace('T', ' ');
    case 'day': return t.slice(0, 10);
    default: return t.slice(0, 7);
  }
}

// attachTips shows the data-tip of the bar or point under the pointer in
// the element tip (and keeps the last one shown until another).
export function attachTips(svg, tip) {
  const show = (ev) => {
    const el = ev.target.closest ? ev.target.closest('[data-tip]') : null;
    if (!el) return;
    for (const x of svg.querySelectorAll('.hover')) x.classList.remove('hover');
    el.classList.add('hover');
    replace(tip, el.dataset.tip);
  };
  svg.addEventListener('mouseover', show);
  svg.addEventListener('focusin', show);
  return svg;
}

// seriesChart returns an <svg> for the buckets of GET /counters/{id}/series
// (or any {id, granularity, buckets: [{start, count}], total}).
export function seriesChart(series) {
  const buckets = series.buckets || [];
  // Counts may be BigInts (parseJSON): exact in labels and tooltips,
  // numbers only for the geometry.
  const exactMax = buckets.reduce((m, b) => (cmpNum(b.count, m) > 0 ? b.count : m), 0);
  const max = Number(exactMax);
  // Room at the left for the largest count, digit for digit.
  const P = { ...PAD, left: Math.max(PAD.left, Math.ceil(fmtNum(exactMax).length * 6.6) + 14) };
  const iw = W - P.left - P.right, ih = H - P.top - P.bottom;
  const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': `${series.granularity} series of ${series.id}: ${buckets.length} buckets, total ${fmtNum(series.total)}` });
  const step = buckets.length ? iw / buckets.length : iw;
  const bw = Math.max(1, step * 0.8);
  const y0 = P.top + ih;
  buckets.forEach((b, i) => {
    const count = Number(b.count);
    const tip = `${label(b.start, series.granularity)}: ${fmtNum(b.count)}`;
    const x = P.left + i * step;
    // A transparent full-height hit area keeps small and empty buckets
    // hoverable; the bar itself is drawn over it.
    const g = s('g', { class: 'bucket', 'data-tip': tip, 'data-count': String(b.count), 'data-start': String(b.start), tabindex: 0 },
      s('title', null, tip),
      s('rect', { class: 'hit', x: x.toFixed(1), y: P.top, width: step.toFixed(1), height: ih }));
    if (count > 0 && max > 0) {
      const bh = Math.max(1, (count / max) * ih);
      g.append(s('rect', { class: 'bar', x: (x + (step - bw) / 2).toFixed(1), y: (y0 - bh).toFixed(1), width: bw.toFixed(1), height: bh.toFixed(1) }));
    }
    svg.append(g);
  });
  svg.append(
    s('line', { class: 'axis', x1: P.left, y1: y0, x2: W - P.right, y2: y0 }),
    s('line', { class: 'axis', x1: P.left, y1: P.top, x2: P.left, y2: y0 }),
    s('text', { x: P.left - 6, y: P.top + 10, 'text-anchor': 'end' }, fmtNum(exactMax)),
    s('text', { x: P.left - 6, y: y0, 'text-anchor': 'end' }, '0'),
  );
  if (buckets.length) {
    svg.append(
      s('text', { x: P.left, y: H - 12 }, label(buckets[0].start, series.granularity)),
      s('text', { x: W - P.right, y: H - 12, 'text-anchor': 'end' }, label(buckets[buckets.length - 1].start, series.granularity)),
    );
  }
  if (max <= 0) {
    svg.append(s('text', { x: P.left + iw / 2, y: P.top + ih / 2, 'text-anchor': 'middle' }, 'no increments in this range'));
  }
  return svg;
}

// goDuration reads a Go duration's text ("1h0m0s", "500ms") in ms; NaN
// when it is not one.
export function goDuration(text) {
  const re = /([0-9]+(?:\.[0-9]+)?)(h|ms|m|s|us|µs|ns)/y;
  const unit = { h: 3600e3, m: 60e3, s: 1e3, ms: 1, us: 1e-3, 'µs': 1e-3, ns: 1e-6 };
  let ms = 0, i = 0;
  if (!text || text === '0s') return text === '0s' ? 0 : NaN;
  while (i < text.length) {
    re.lastIndex = i;
    const m = re.exec(text);
    if (!m) return NaN;
    ms += Number(m[1]) * unit[m[2]];
    i = re.lastIndex;
  }
  return ms;
}

// windowBuckets is every bucket of a window counter's window, oldest
// first, those the API did not list (empty ones) at 0; at most 1000.
export function windowBuckets(v, now = Date.now()) {
  const g = goDuration(v.granularity), w = goDuration(v.window);
  const listed = v.buckets || [];
  if (!(g > 0) || !(w >= g) || w / g > 1000) return listed;
  const byStart = new Map(listed.map((b) => [new Date(b.start).getTime(), b.count]));
  // The newest bucket: the listed buckets' grid carried up to now (they
  // are g apart), or now's bucket when none is listed.
  let newest = byStart.size ? Math.max(...byStart.keys()) : Math.floor(now / g) * g;
  while (newest + g <= now) newest += g;
  const out = [];
  for (let t = newest - w + g; t <= newest; t += g) {
    out.push({ start: new Date(t).toISOString(), count: byStart.has(t) ? byStart.get(t) : 0 });
  }
  return out;
}

// fmtFigure formats a measured figure (a float) with up to 3 decimals.
export function fmtFigure(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  return Number(v).toLocaleString('en-US', { maximumFractionDigits: 3 });
}

// lineChart returns an <svg> of lines over time: lines is
// [{name, cls, points: [{t, v}]}] (v null: a gap), unit the values' unit.
// Time runs over [from, to] (Date), values from 0 to the largest.
export function lineChart(lines, { from, to, unit, title, empty }) {
  const iw = W - PAD.left - PAD.right, ih = H - PAD.top - PAD.bottom;
  const svg = s('svg', { class: 'chart line-chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
  let max = 0;
  for (const l of lines) for (const p of l.points) if (p.v !== null && p.v > max) max = p.v;
  const t0 = from.getTime(), span = Math.max(1, to.getTime() - t0);
  const x = (t) => PAD.left + ((new Date(t).getTime() - t0) / span) * iw;
  const y = (v) => PAD.top + ih - (max > 0 ? (v / max) * ih : 0);
  const y0 = PAD.top + ih;
  svg.append(
    s('line', { class: 'axis', x1: PAD.left, y1: y0, x2: W - PAD.right, y2: y0 }),
    s('line', { class: 'axis', x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: y0 }),
    s('text', { x: PAD.left - 6, y: PAD.top + 10, 'text-anchor': 'end' }, `${fmtFigure(max)}${unit ? ' ' + unit : ''}`),
    s('text', { x: PAD.left - 6, y: y0, 'text-anchor': 'end' }, '0'),
    s('text', { x: PAD.left, y: H - 12 }, label(from.toISOString(), 'minute')),
    s('text', { x: W - PAD.right, y: H - 12, 'text-anchor': 'end' }, label(to.toISOString(), 'minute')),
  );
  let any = false;
  for (const l of lines) {
    let d = '';
    let pen = false;
    for (const p of l.points) {
      if (p.v === null || p.v === undefined) { pen = false; continue; }
      d += `${pen ? 'L' : 'M'}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)} `;
      pen = true;
      any = true;
    }
    if (d) svg.append(s('path', { class: 'line ' + (l.cls || ''), d: d.trim() }));
    for (const p of l.points) {
      if (p.v === null || p.v === undefined) continue;
      const tip = `${label(p.t, 'second')}: ${l.name} ${fmtFigure(p.v)}${unit ? ' ' + unit : ''}`;
      svg.append(s('circle', { class: 'point ' + (l.cls || ''), cx: x(p.t).toFixed(1), cy: y(p.v).toFixed(1), r: 3, 'data-tip': tip, tabindex: 0 }, s('title', null, tip)));
    }
  }
  if (!any) svg.append(s('text', { x: PAD.left + iw / 2, y: PAD.top + ih / 2, 'text-anchor': 'middle' }, empty || 'no samples yet'));
  return svg;
}

// legend names the lines of a chart.
export function legend(lines) {
  return h('p', { class: 'legend' }, lines.map((l) => h('span', { class: 'key ' + (l.cls || '') }, l.name)));
}
