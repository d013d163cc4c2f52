// #/ratelimit: the policies (GET /ratelimit/policies) and this node's
// recent decisions (GET /ratelimit/decisions), refreshed every 2 s.
import { get } from './api.js';
import { h, replace, fmtNum, fmtTime, errorText } from './dom.js';

const POLL_MS = 2000;

function cell(v) {
  return h('td', null, v === undefined || v === null || v === '' ? '' : String(v));
}

export function renderRateLimit(main, ctx) {
  const pol = h('tbody');
  const polMsg = h('p', { class: 'muted' });
  const dec = h('tbody');
  const decMsg = h('p', { class: 'muted' });
  replace(main, h('h2', null, 'Rate limits'),
    h('section', null, h('h3', null, 'Policies'), h('table', { id: 'policies' },
      h('thead', null, h('tr', null, ['name', 'match', 'namespace', 'algorithm', 'limit', 'period', 'burst', 'cost', 'final'].map((c) => h('th', null, c)))), pol), polMsg),
    h('section', null, h('h3', null, 'Recent decisions'), h('table', { id: 'decisions' },
      h('thead', null, h('tr', null, ['time', 'key', 'decision', 'policy', 'cost', 'remaining', 'limit', 'retry after'].map((c) => h('th', null, c)))), dec), decMsg));

  get('/ratelimit/policies', ctx.signal).then((b) => {
    const ps = b.policies || [];
    replace(pol, ps.map((p) => h('tr', null, cell(p.name), cell(p.match), cell(p.namespace), cell(p.algorithm), cell(fmtNum(p.limit)),
      cell(p.period), cell(p.burst), cell(p.cost), cell(p.final ? 'yes' : ''))));
    replace(polMsg, ps.length ? '' : 'No policies: checks give their limits inline (docs/ratelimit.md).');
  }).catch((e) => { if (!ctx.handled(e)) replace(polMsg, h('span', { class: 'error' }, errorText(e))); });

  ctx.every(async () => {
    try {
      const b = await get('/ratelimit/decisions?limit=50', ctx.signal);
      replace(dec, b.decisions.map((d) => h('tr', null, cell(fmtTime(d.time)), cell(d.key),
        h('td', { class: d.allowed ? 'ok' : 'bad' }, d.allowed ? 'allowed' : 'denied'),
        cell(d.policy + (d.limits > 1 ? ` (+${d.limits - 1})` : '')), cell(d.cost), cell(fmtNum(d.remaining)), cell(fmtNum(d.limit)),
        cell(d.allowed ? '' : d.retry_after_ms + ' ms'))));
      replace(decMsg, `${fmtNum(b.total)} check${b.total === 1 ? '' : 's'} decided through this node since it started; the last ${b.capacity} are kept.`);
    } catch (e) {
      if (!ctx.handled(e)) replace(decMsg, h('span', { class: 'error' }, errorText(e)));
    }
  }, POLL_MS);
}
