// #/counter/ID: a counter's live value (polled every second), a window
// counter's buckets, its rollup series per granularity over a chosen time
// range (GET /counters/{id}/series) and, for hll counters, unique counts
// over the last N days (GET /counters/{id}/uniques).
import { get, send, counterPath } from './api.js';
import { h, replace, fmtNum, fmtTime, errorText } from './dom.js';
import { seriesChart, attachTips, windowBuckets } from './chart.js';
import { shownValue } from './counters.js';

const GRANULARITIES = ['minute', 'hour', 'day', 'month'];
const POLL_MS = 1000;
const SERIES_POLL_MS = 3000;
// Time ranges of the series chart ('' : the last 60 buckets of the
// chosen granularity), each read at the granularity that suits it.
const RANGES = {
  '': { label: 'last 60 buckets' },
  '1h': { label: 'last hour', from: '-1h', granularity: 'minute' },
  '24h': { label: 'last day', from: '-24h', granularity: 'hour' },
  '30d': { label: 'last 30 days', from: '-30d', granularity: 'day' },
  'custom': { label: 'custom…' },
};

// granularityFor is the granularity a custom range reads best at: about
// 60 to 180 buckets.
export function granularityFor(ms) {
  const H = 3600e3;
  if (ms <= 3 * H) return 'minute';
  if (ms <= 7 * 24 * H) return 'hour';
  if (ms <= 180 * 24 * H) return 'day';
  return 'month';
}

// localInput is d as a datetime-local input's value (local time).
function localInput(d) {
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

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
  const windowBox = h('div', { id: 'window' });
  const seriesBox = h('div', { id: 'series' });
  const uniquesBox = h('div', { id: 'uniques' });
  const editBox = h('section', { id: 'edit' });
  replace(main,
    h('p', null, h('a', { href: '#/counters?prefix=' + encodeURIComponent(id.includes(':') ? id.slice(0, id.indexOf(':') + 1) : '') }, '← counters')),
    h('h2', { id: 'counter-id' }, id),
    h('section', null, h('h3', null, 'Value ', h('span', { class: 'muted' }, '(live)')), value, meta, extra),
    windowBox, editBox, seriesBox, uniquesBox);
  const state = { view: null };
  renderEdit(editBox, id, state, ctx);

  // What the server keeps for this id: its rollup spec, if any.
  const rollups = Promise.all([get('/capabilities', ctx.signal), get('/rollups', ctx.signal)])
    .then(([caps, specs]) => ({ caps, spec: specFor(specs.rollups || {}, id) }));
  let last = null, kind = null;
  ctx.every(async () => {
    try {
      const v = await get(counterPath(id), ctx.signal);
      state.view = v;
      if (state.onView) state.onView(v);
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
      if (v.exists && v.kind === 'window') renderWindow(windowBox, id, v);
      else replace(windowBox);
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
  const rangeSel = h('select', { id: 'series-range', 'aria-label': 'time range' },
    Object.entries(RANGES).map(([k, r]) => h('option', { value: k }, r.label)));
  const now = new Date();
  const fromIn = h('input', { id: 'range-from', type: 'datetime-local', value: localInput(new Date(now - 6 * 3600e3)), 'aria-label': 'from' });
  const toIn = h('input', { id: 'range-to', type: 'datetime-local', value: localInput(now), 'aria-label': 'to' });
  const custom = h('form', { class: 'inline', id: 'range-custom', hidden: true }, 'from', fromIn, 'to', toIn, h('button', { type: 'submit' }, 'Show'));
  const chart = h('div', { id: 'series-chart' });
  const tip = h('p', { class: 'tip', id: 'series-tip' }, 'Point at a bar for its exact count.');
  const total = h('p', { class: 'muted', id: 'series-total' });
  replace(box, h('div', { class: 'inline' }, tabs, rangeSel), custom, chart, tip, total);
  let customRange = null; // {from, to} ISO times of the custom range
  let current = grans.includes('minute') ? 'minute' : grans[0];
  let range = '';
  let seq = 0; // the latest request's number: older answers are dropped
  // draw reads the series of granularity current over range and draws it.
  async function draw() {
    if (range === 'custom' && !customRange) return; // until the form is sent
    const n = ++seq;
    const q = new URLSearchParams({ granularity: current });
    if (range === 'custom' && customRange) {
      q.set('from', customRange.from);
      q.set('to', customRange.to);
    } else if (range && range !== 'custom') {
      q.set('from', RANGES[range].from);
      q.set('to', 'now');
    }
    try {
      const sr = await get(counterPath(id, '/series?' + q), ctx.signal);
      if (n !== seq) return;
      const svg = attachTips(seriesChart(sr), tip);
      // Keep the readout on the bucket pointed at across live redraws.
      const hovered = chart.querySelector('.bucket.hover');
      const start = hovered ? hovered.dataset.start : null;
      replace(chart, svg);
      const again = start && [...svg.querySelectorAll('.bucket')].find((g) => g.dataset.start === start);
      if (again) {
        again.classList.add('hover');
        replace(tip, again.dataset.tip);
      }
      chart.dataset.granularity = current;
      chart.dataset.range = range;
      replace(total, `${sr.buckets.length} ${current} buckets from ${fmtTime(sr.from)} to ${fmtTime(sr.to)}, total ${fmtNum(sr.total)} (source: ${sr.source}; live, every ${SERIES_POLL_MS / 1000} s)`);
    } catch (e) {
      if (n === seq && !ctx.handled(e)) replace(chart, h('p', { class: 'error' }, errorText(e)));
    }
  }
  function show(g) {
    current = g;
    replace(tabs, grans.map((x) => h('button', { type: 'button', class: 'tab' + (x === g ? ' active' : ''), 'data-granularity': x, onclick: () => show(x) }, x)));
    draw();
  }
  custom.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const f = new Date(fromIn.value), t = new Date(toIn.value);
    if (isNaN(f) || isNaN(t) || f >= t) {
      replace(total, h('span', { class: 'error' }, 'a custom range needs a start before its end'));
      return;
    }
    customRange = { from: f.toISOString(), to: t.toISOString() };
    const want = granularityFor(t - f);
    show(grans.includes(want) ? want : grans.find((g) => GRANULARITIES.indexOf(g) >= GRANULARITIES.indexOf(want)) || grans[grans.length - 1]);
  });
  rangeSel.addEventListener('change', () => {
    range = rangeSel.value;
    custom.hidden = range !== 'custom';
    if (range === 'custom') {
      if (customRange) draw();
      return; // drawn when the form is sent
    }
    // The range picks the granularity it reads best at, among those kept.
    const want = range ? RANGES[range].granularity : current;
    show(grans.includes(want) ? want : grans.find((g) => GRANULARITIES.indexOf(g) >= GRANULARITIES.indexOf(want)) || grans[grans.length - 1]);
  });
  show(current);
  // Live: redraw while the page is shown (the view's signal stops it).
  ctx.every(async () => { await new Promise((r) => setTimeout(r, SERIES_POLL_MS)); if (!ctx.signal.aborted) await draw(); }, 0);
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
  const byDay = h('div', { id: 'uniques-chart' });
  const tip = h('p', { class: 'tip', id: 'uniques-tip' }, 'Point at a bar for its exact count.');
  async function run(ev) {
    if (ev) ev.preventDefault();
    try {
      const u = await get(counterPath(id, '/uniques?last=' + encodeURIComponent(days.value + 'd')), ctx.signal);
      replace(out, h('span', { class: 'big' }, fmtNum(u.value)),
        h('span', { class: 'muted' }, `  95% between ${fmtNum(u.low)} and ${fmtNum(u.high)}, ${u.sketches} sketches from ${fmtTime(u.from)} to ${fmtTime(u.to)}`));
    } catch (e) {
      if (!ctx.handled(e)) replace(out, h('span', { class: 'error' }, errorText(e)));
    }
    drawDays();
  }
  // drawDays charts, for each of the last N days (at most 31), the
  // uniques of the days up to today from that day on: GET uniques?last=1d
  // is today's, last=2d yesterday's and today's together, and so on.
  async function drawDays() {
    const n = Math.max(1, Math.min(31, Number(days.value) || 7));
    try {
      const us = await Promise.all(Array.from({ length: n }, (_, i) => get(counterPath(id, `/uniques?last=${i + 1}d`), ctx.signal)));
      const buckets = us.map((u) => ({ start: u.from, count: u.value })).reverse();
      replace(byDay, attachTips(seriesChart({ id, granularity: 'day', buckets, total: us[n - 1].value }), tip));
      byDay.dataset.days = String(n);
    } catch (e) {
      if (!ctx.handled(e)) replace(byDay, h('p', { class: 'error' }, errorText(e)));
    }
  }
  replace(section, h('section', null, h('h3', null, 'Uniques'),
    h('form', { class: 'inline', id: 'uniques-form', onsubmit: run }, 'over the last', days, 'days', h('button', { type: 'submit' }, 'Count')), out,
    h('h3', null, 'Uniques by day ', h('span', { class: 'muted' }, '(each bar: distinct items from that UTC day through today)')), byDay, tip));
  run();
}

// renderWindow draws a window counter's buckets (GET /counters/{id}
// answers them with the value), exact counts in the readout.
function renderWindow(box, id, v) {
  let chart = box.querySelector('#window-chart'), tip = box.querySelector('#window-tip');
  if (!chart) {
    chart = h('div', { id: 'window-chart' });
    tip = h('p', { class: 'tip', id: 'window-tip' }, 'Point at a bar for its exact count.');
    replace(box, h('section', null, h('h3', null, 'Window buckets ', h('span', { class: 'muted', id: 'window-spec' })), chart, tip));
  }
  replace(box.querySelector('#window-spec'), `(${v.fixed ? 'fixed' : 'sliding'} window of ${v.window}, ${v.granularity} buckets; live)`);
  const hovered = chart.querySelector('.bucket.hover');
  const start = hovered ? hovered.dataset.start : null;
  const svg = attachTips(seriesChart({ id, granularity: 'second', buckets: windowBuckets(v), total: v.value }), tip);
  replace(chart, svg);
  const again = start && [...svg.querySelectorAll('.bucket')].find((g) => g.dataset.start === start);
  if (again) {
    again.classList.add('hover');
    replace(tip, again.dataset.tip);
  }
  chart.dataset.buckets = String(svg.querySelectorAll('.bucket').length);
}

// intText checks a typed integer (any size: sent as a BigInt, exactly).
function intValue(text) {
  const t = text.trim();
  if (!/^-?[0-9]+$/.test(t)) throw new Error(`“${text}” is not an integer`);
  return BigInt(t);
}

// deltaValue is an increment's delta: an integer, or for a float counter
// decimal text (sent as a string holding the number).
function deltaValue(text, kind) {
  const t = text.trim();
  if (kind === 'float' && /^-?[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?$/i.test(t)) return t;
  return intValue(t);
}

// renderEdit offers the edits the token's grants allow on id (GET
// /whoami?id=): increment and set (with the version read as expected
// version) and the TTL with write; delete with admin. Deletes and TTL
// changes ask for a confirmation first.
async function renderEdit(box, id, state, ctx) {
  let perm = 'none';
  try {
    perm = (await get('/whoami?id=' + encodeURIComponent(id), ctx.signal)).perm || 'none';
  } catch (e) {
    if (!ctx.handled(e)) replace(box, h('p', { class: 'error' }, errorText(e)));
    return;
  }
  const canWrite = perm === 'write' || perm === 'admin', canAdmin = perm === 'admin';
  const msg = h('p', { id: 'edit-result', class: 'muted' });
  const confirmBox = h('div', { id: 'confirm' });
  const busy = (fn) => async (ev) => {
    if (ev) ev.preventDefault();
    replace(confirmBox);
    try {
      replace(msg, h('span', { class: 'muted' }, 'sending…'));
      replace(msg, h('span', { class: 'ok' }, await fn()));
    } catch (e) {
      if (!ctx.handled(e)) replace(msg, h('span', { class: 'error' }, errorText(e)));
    }
  };
  // confirm shows question with a button that runs action, and Cancel.
  const confirm = (question, label, action) => (ev) => {
    ev.preventDefault();
    replace(confirmBox, h('p', { class: 'confirm' }, question, ' ',
      h('button', { type: 'button', id: 'confirm-yes', class: 'danger', onclick: busy(action) }, label), ' ',
      h('button', { type: 'button', id: 'confirm-no', class: 'secondary', onclick: () => replace(confirmBox) }, 'Cancel')));
  };
  const why = (need) => `needs ${need} on ${id} (this token has ${perm})`;
  const delta = h('input', { id: 'edit-delta', value: '1', size: 12, autocomplete: 'off', 'aria-label': 'delta' });
  const setValue = h('input', { id: 'edit-value', size: 22, autocomplete: 'off', placeholder: 'new value', 'aria-label': 'value' });
  const expected = h('input', { id: 'edit-version', size: 12, autocomplete: 'off', placeholder: 'any', 'aria-label': 'expected version' });
  const ttl = h('input', { id: 'edit-ttl', size: 8, autocomplete: 'off', placeholder: 'seconds', 'aria-label': 'TTL in seconds' });
  const kind = () => (state.view && state.view.exists ? state.view.kind : 'counter');
  state.onView = (v) => { if (document.activeElement !== expected && !expected.dataset.touched) expected.value = v.exists ? String(v.version) : '0'; };
  expected.addEventListener('input', () => { expected.dataset.touched = '1'; });
  const w = !canWrite ? { disabled: true, title: why('write') } : {};
  replace(box, h('h3', null, 'Edit ', h('span', { class: 'muted', id: 'edit-perm' }, `(${perm} on this id)`)),
    h('form', { class: 'inline', id: 'edit-increment', onsubmit: busy(async () => {
      const r = await send('POST', counterPath(id, '/increment'), { delta: deltaValue(delta.value, kind()) }, ctx.signal);
      return `incremented: value ${fmtNum(r.value)}, version ${fmtNum(r.version)}`;
    }) }, 'add', delta, h('button', { type: 'submit', ...w }, 'Increment')),
    h('form', { class: 'inline', id: 'edit-set', onsubmit: busy(async () => {
      const body = { value: intValue(setValue.value) };
      if (expected.value.trim() !== '') body.expected_version = intValue(expected.value);
      const r = await send('PUT', counterPath(id), body, ctx.signal);
      delete expected.dataset.touched;
      return `set: value ${fmtNum(r.value)}, version ${fmtNum(r.version)}`;
    }) }, 'set to', setValue, 'if version is', expected, h('button', { type: 'submit', ...w }, 'Set')),
    h('form', { class: 'inline', id: 'edit-ttl-form', onsubmit: (ev) => {
      ev.preventDefault();
      let secs;
      try { secs = intValue(ttl.value); } catch (e) { replace(msg, h('span', { class: 'error' }, e.message)); return; }
      if (secs <= 0n) { replace(msg, h('span', { class: 'error' }, 'a TTL is a positive number of seconds')); return; }
      confirm(`Expire ${id} in ${fmtNum(secs)} s?`, 'Set TTL', async () => {
        const r = await send('PUT', counterPath(id, '/ttl'), { ttl_ms: secs * 1000n }, ctx.signal);
        return r.changed ? `expires in ${fmtNum(secs)} s` : 'no TTL set (the counter does not exist)';
      })(ev);
    } }, 'expire in', ttl, 's', h('button', { type: 'submit', ...w }, 'Set TTL…'),
    h('button', { type: 'button', id: 'edit-persist', class: 'secondary', ...w, onclick: confirm(`Remove the TTL of ${id}?`, 'Remove TTL', async () => {
      const r = await send('DELETE', counterPath(id, '/ttl'), undefined, ctx.signal);
      return r.changed ? 'TTL removed' : 'it had no TTL';
    }) }, 'Remove TTL…')),
    h('p', null, h('button', { type: 'button', id: 'edit-delete', class: 'danger', ...(!canAdmin ? { disabled: true, title: why('admin') } : {}),
      onclick: confirm(`Delete ${id}? Its value and history cannot be read back.`, 'Delete', async () => {
        const r = await send('DELETE', counterPath(id), undefined, ctx.signal);
        return r.deleted ? 'deleted' : 'it did not exist';
      }) }, 'Delete…')),
    !canWrite ? h('p', { class: 'muted' }, `Editing ${why('write')}.`) : null,
    confirmBox, msg);
}
