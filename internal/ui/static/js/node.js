// #/node: this node's own request rate, p50/p99 latency, shed rate,
// replication lag and stream lag over the last hour (GET /node/stats: an
// in-memory ring of samples the server takes every 10 s; no Prometheus
// needed), refreshed every 5 s.
import { get } from './api.js';
import { h, replace, errorText } from './dom.js';
import { lineChart, legend, attachTips, fmtFigure } from './chart.js';

const POLL_MS = 5000;

const CHARTS = [
  { id: 'rate', title: 'Requests', unit: '/s', lines: [{ name: 'requests (HTTP + RESP)', key: 'requests_per_s', cls: 'l1' }] },
  { id: 'latency', title: 'Latency', unit: 'ms', lines: [{ name: 'p50', key: 'p50_ms', cls: 'l1' }, { name: 'p99', key: 'p99_ms', cls: 'l2' }] },
  { id: 'shed', title: 'Shed', unit: '/s', lines: [{ name: 'shed requests', key: 'shed_per_s', cls: 'l2' }] },
  { id: 'replication', title: 'Replication lag', unit: 's', lines: [{ name: 'replication lag', key: 'replication_lag_s', cls: 'l1' }], absent: 'not a cluster member' },
  { id: 'stream', title: 'Stream lag', unit: 'records', lines: [{ name: 'consumer lag', key: 'stream_lag', cls: 'l1' }], absent: 'no event stream (--events)' },
];

export function renderNode(main, ctx) {
  const latest = h('dl', { class: 'kv', id: 'node-latest' });
  const note = h('p', { class: 'muted', id: 'node-note' }, 'loading…');
  const boxes = {};
  const sections = CHARTS.map((c) => {
    boxes[c.id] = { chart: h('div', { id: `node-${c.id}-chart`, class: 'node-chart' }), tip: h('p', { class: 'tip', id: `node-${c.id}-tip` }, 'Point at a sample for its value.') };
    return h('section', null, h('h3', null, `${c.title} `, h('span', { class: 'muted' }, `(${c.unit})`)), legend(c.lines), boxes[c.id].chart, boxes[c.id].tip);
  });
  replace(main, h('h2', null, 'This node'), h('section', null, latest, note), sections);
  ctx.every(async () => {
    try {
      const st = await get('/node/stats', ctx.signal);
      const samples = st.samples || [];
      const to = new Date();
      const from = new Date(to.getTime() - st.window_s * 1000);
      const last = samples[samples.length - 1];
      replace(latest, CHARTS.flatMap((c) => c.lines.flatMap((l) => [
        h('dt', null, `${l.name}`),
        h('dd', { id: `node-latest-${l.key}` }, last && last[l.key] !== null ? `${fmtFigure(last[l.key])} ${c.unit}` : (c.absent && last ? c.absent : '—')),
      ])));
      replace(note, samples.length
        ? `${samples.length} samples, one every ${st.interval_s} s, kept for ${st.window_s / 60} minutes in this node’s memory; the latest ends ${last.t}.`
        : `No sample yet: the first arrives ${st.interval_s} s after the node started.`);
      main.dataset.samples = String(samples.length);
      for (const c of CHARTS) {
        const lines = c.lines.map((l) => ({ name: l.name, cls: l.cls, points: samples.map((x) => ({ t: x.t, v: x[l.key] })) }));
        const box = boxes[c.id];
        const svg = attachTips(lineChart(lines, { from, to, unit: c.unit, title: `${c.title} over the last hour`, empty: samples.length && c.absent ? c.absent : '' }), box.tip);
        replace(box.chart, svg);
        box.chart.dataset.points = String(svg.querySelectorAll('circle.point').length);
      }
    } catch (e) {
      if (!ctx.handled(e)) replace(note, h('span', { class: 'error' }, errorText(e)));
    }
  }, POLL_MS);
}
