// A bar chart of rollup buckets drawn as SVG: one bar per bucket, the
// largest bucket at full height, the first and last bucket starts and the
// maximum as labels.
import { s, fmtNum, cmpNum } from './dom.js';

const W = 900, H = 260, PAD = { left: 64, right: 12, top: 12, bottom: 36 };

function label(iso, granularity) {
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  const t = d.toISOString();
  switch (granularity) {
    case 'minute': case 'hour': return t.slice(0, 16).replace('T', ' ');
    case 'day': return t.slice(0, 10);
    default: return t.slice(0, 7);
  }
}

// seriesChart returns an <svg> for the buckets of GET /counters/{id}/series.
export function seriesChart(series) {
  const buckets = series.buckets || [];
  // Counts may be BigInts (parseJSON): exact in labels and tooltips,
  // numbers only for the geometry.
  const exactMax = buckets.reduce((m, b) => (cmpNum(b.count, m) > 0 ? b.count : m), 0);
  const max = Number(exactMax);
  const iw = W - PAD.left - PAD.right, ih = H - PAD.top - PAD.bottom;
  const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': `${series.granularity} series of ${series.id}: ${buckets.length} buckets, total ${fmtNum(series.total)}` });
  const step = buckets.length ? iw / buckets.length : iw;
  const bw = Math.max(1, step * 0.8);
  buckets.forEach((b, i) => {
    const count = Number(b.count);
    if (count <= 0 || max <= 0) return;
    const bh = Math.max(1, (count / max) * ih);
    svg.append(s('rect', { class: 'bar', x: (PAD.left + i * step + (step - bw) / 2).toFixed(1),
      y: (PAD.top + ih - bh).toFixed(1), width: bw.toFixed(1), height: bh.toFixed(1) },
    s('title', null, `${label(b.start, series.granularity)}: ${fmtNum(b.count)}`)));
  });
  const y0 = PAD.top + ih;
  svg.append(
    s('line', { class: 'axis', x1: PAD.left, y1: y0, x2: W - PAD.right, y2: y0 }),
    s('line', { class: 'axis', x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: y0 }),
    s('text', { x: PAD.left - 6, y: PAD.top + 10, 'text-anchor': 'end' }, fmtNum(exactMax)),
    s('text', { x: PAD.left - 6, y: y0, 'text-anchor': 'end' }, '0'),
  );
  if (buckets.length) {
    svg.append(
      s('text', { x: PAD.left, y: H - 12 }, label(buckets[0].start, series.granularity)),
      s('text', { x: W - PAD.right, y: H - 12, 'text-anchor': 'end' }, label(buckets[buckets.length - 1].start, series.granularity)),
    );
  }
  if (max <= 0) {
    svg.append(s('text', { x: PAD.left + iw / 2, y: PAD.top + ih / 2, 'text-anchor': 'middle' }, 'no increments in this range'));
  }
  return svg;
}
