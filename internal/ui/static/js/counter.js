// #/counter/ID: a counter's live value (polled every second), its rollup
// series per granularity (GET /counters/{id}/series) and, for hll
// counters, unique counts over the last N days (GET /counters/{id}/uniques).
import { get, counterPath } from './api.js';
import { h, replace, fmtNum, fmtTime, errorText } from './dom.js';
import { seriesChart } from './chart.js';
import { shownValue } from './counters.js';

const GRANULARITIES = ['minute', 'hour', 'day', 'month'];
const POLL_MS = 1000;

// specFor is the rollup spec covering id: its own, else its namespace's.
function specFor(rollups, id) {
  const ns = id.includes(':') ? id.slice(0, id.indexOf(':')) : null;
  return rollups[id] || (ns !== null && rollups[ns]) || null;
}

const ADDITIVE = ['counter', 'sharded', 'pn', 'window'];

export function renderCounter(main, id, ctx) {
  const value = h('div', { id: 'live-value', class: 'big' }, '…');
  const meta = h('dl', { class: 'kv', id: 'counter-meta' });
  const extra = h('div');
  const seriesBox = h('div', { id: 'series' });
  const uniquesBox = h('div', { id: 'uniques' });
  replace(main,
    h('p', null, h('a', { href: '#/counters?prefix=' + encodeURIComponent(id.includes(':') ? id.slice(0, id.indexOf(':') + 1) : '') }, '← counters')),
    h('h2', { id: 'counter-id' }, id),
    h('section', null, h('h3', null, 'Value ', h('span', { class: 'muted' }, '(live)')), value, meta, extra),
    seriesBox, uniquesBox);

  // What the server keeps for this id: its rollup spec, if any.
  const rollups = Promise.all([get('/capabilities', ctx.signal), get('/rollups', ctx.signal)])
    .then(([caps, specs]) => ({ caps, spec: specFor(specs.rollups || {}, id) }));
  let last = null, kind = null;
  ctx.every(async () => {
    try {
      const v = await get(counterPath(id), ctx.signal);
      const shown = shownValue(v);
      if (last !== null && shown !== last) {
        value.classList.remove('flash');
        void value.offsetWidth; // restart the animation
        value.classList.add('flash');
      }
      last = shown;
      replace(value, shown);
      replace(meta,
        h('dt', null, 'kind'), h('dd', { id: 'counter-kind' }, v.exists ? v.kind : 'does not exist'),
        v.exists ? [h('dt', null, 'version'), h('dd', { id: 'counter-version' }, fmtNum(v.version))] : null,
        h('dt', null, 'updated'), h('dd', null, fmtTime(v.updated_at) || '—'),
        h('dt', null, 'expires'), h('dd', null, fmtTime(v.expires_at) || 'never'),
        v.std_error !== undefined ? [h('dt', null, 'std error'), h('dd', null, (v.std_error * 100).toFixed(2) + '%')] : null);
      if (v.fields) {
        replace(extra, h('table', null, h('thead', null, h('tr', null, h('th', null, 'field'), h('th', { class: 'num' }, 'value'))),
          h('tbody', null, Object.entries(v.fields).map(([f, n]) => h('tr', null, h('td', null, f), h('td', { class: 'num' }, fmtNum(n)))))));
      }
      if (v.exists && kind !== v.kind) {
        kind = v.kind;
        replace(seriesBox);
        replace(uniquesBox);
        if (ADDITIVE.includes(kind)) renderSeries(seriesBox, id, rollups, ctx);
        else if (kind === 'hll') renderUniques(uniquesBox, id, rollups, ctx);
      }
    } catch (e) {
      if (!ctx.handled(e)) replace(value, h('span', { class: 'error' }, errorText(e)));
    }
  }, POLL_MS);
}

// noSpec explains why id keeps no history.
function noSpec(id, what) {
  const ns = id.includes(':') ? id.slice(0, id.indexOf(':')) : id;
  return h('p', { class: 'muted' }, `No rollup spec covers this counter, so it keeps no ${what}. Add one for its namespace: PUT /rollups/${ns} (docs/time.md).`);
}

async function renderSeries(section, id, rollups, ctx) {
  const box = h('div', null, h('p', { class: 'muted' }, 'loading…'));
  replace(section, h('section', null, h('h3', null, 'Series'), box));
  let grans;
  try {
    const { caps, spec } = await rollups;
    if (spec) grans = GRANULARITIES.filter((g) => spec[g] && spec[g] !== '0');
    else if (caps.series_without_spec) grans = GRANULARITIES;
    else {
      replace(box, noSpec(id, 'series'));
      return;
    }
  } catch (e) {
    if (!ctx.handled(e)) replace(box, h('p', { class: 'error' }, errorText(e)));
    return;
  }
  if (!grans.length) {
    replace(box, h('p', { class: 'muted' }, 'The rollup spec keeps no additive granularity.'));
    return;
  }
  const tabs = h('div', { class: 'tabs' });
  const chart = h('div', { id: 'series-chart' });
  const total = h('p', { class: 'muted', id: 'series-total' });
  replace(box, tabs, chart, total);
  let current = grans.includes('minute') ? 'minute' : grans[0];
  async function show(g) {
    current = g;
    replace(tabs, grans.map((x) => h('button', { type: 'button', class: 'tab' + (x === g ? ' active' : ''), 'data-granularity': x, onclick: () => show(x) }, x)));
    try {
      const sr = await get(counterPath(id, '/series?granularity=' + g), ctx.signal);
      if (current !== g) return;
      replace(chart, seriesChart(sr));
      chart.dataset.granularity = g;
      replace(total, `${sr.buckets.length} ${g} buckets from ${fmtTime(sr.from)} to ${fmtTime(sr.to)}, total ${fmtNum(sr.total)} (source: ${sr.source})`);
    } catch (e) {
      if (!ctx.handled(e)) replace(chart, h('p', { class: 'error' }, errorText(e)));
    }
  }
  show(current);
}

async function renderUniques(section, id, rollups, ctx) {
  try {
    const { caps, spec } = await rollups;
    if (!(spec ? spec.unique_days !== '0' : caps.series_without_spec)) {
      replace(section, h('section', null, h('h3', null, 'Uniques'), noSpec(id, 'unique counts per day')));
      return;
    }
  } catch (e) {
    if (!ctx.handled(e)) replace(section, h('p', { class: 'error' }, errorText(e)));
    return;
  }
  const days = h('input', { id: 'uniques-days', type: 'number', min: 1, max: 400, value: 7, size: 4 });
  const out = h('p', { id: 'uniques-value' });
  async function run(ev) {
    if (ev) ev.preventDefault();
    try {
      const u = await get(counterPath(id, '/uniques?last=' + encodeURIComponent(days.value + 'd')), ctx.signal);
      replace(out, h('span', { class: 'big' }, fmtNum(u.value)),
        h('span', { class: 'muted' }, `  95% between ${fmtNum(u.low)} and ${fmtNum(u.high)}, ${u.sketches} sketches from ${fmtTime(u.from)} to ${fmtTime(u.to)}`));
    } catch (e) {
      if (!ctx.handled(e)) replace(out, h('span', { class: 'error' }, errorText(e)));
    }
  }
  replace(section, h('section', null, h('h3', null, 'Uniques'),
    h('form', { class: 'inline', id: 'uniques-form', onsubmit: run }, 'over the last', days, 'days', h('button', { type: 'submit' }, 'Count')), out));
  run();
}
