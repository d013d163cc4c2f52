// #/counters?prefix=P: browse counters by id prefix (GET /counters), their
// values, and the prefix's aggregate (GET /counters/{prefix}*/aggregate).
import { get, counterPath } from './api.js';
import { h, replace, fmtNum, errorText } from './dom.js';

const PAGE = 100;

export function renderCounters(main, params, ctx) {
  const prefix = params.get('prefix') || '';
  const input = h('input', { id: 'prefix', name: 'prefix', placeholder: 'id prefix, e.g. page_views:', value: prefix, size: 40, autocomplete: 'off' });
  const form = h('form', { class: 'inline', id: 'search', onsubmit: (ev) => {
    ev.preventDefault();
    location.hash = '#/counters?prefix=' + encodeURIComponent(input.value);
  } }, input, h('button', { type: 'submit' }, 'Search'));
  const agg = h('p', { id: 'aggregate', class: 'muted' }, '…');
  const body = h('tbody');
  const more = h('p');
  replace(main, h('h2', null, 'Counters'), form, agg,
    h('section', null, h('table', { id: 'counter-list' },
      h('thead', null, h('tr', null, h('th', null, 'id'), h('th', null, 'kind'), h('th', { class: 'num' }, 'value'))), body), more));

  get('/counters/' + encodeURIComponent(prefix) + '*/aggregate', ctx.signal).then((a) => {
    replace(agg, `${fmtNum(a.count)} counter${a.count === 1 ? '' : 's'}${prefix ? ` with prefix “${prefix}”` : ''}, sum of additive values ${fmtNum(a.value)}`);
  }).catch((e) => { if (!ctx.handled(e)) replace(agg, h('span', { class: 'error' }, errorText(e))); });

  async function page(cursor) {
    replace(more, h('span', { class: 'muted' }, 'loading…'));
    try {
      const q = new URLSearchParams({ limit: String(PAGE) });
      if (prefix) q.set('prefix', prefix);
      if (cursor) q.set('cursor', String(cursor));
      const list = await get('/counters?' + q, ctx.signal);
      for (const id of list.ids) {
        const kind = h('td', { class: 'muted' }, '…');
        const value = h('td', { class: 'num' }, '…');
        body.append(h('tr', { 'data-id': id }, h('td', null, h('a', { href: '#/counter/' + encodeURIComponent(id) }, id)), kind, value));
        get(counterPath(id), ctx.signal).then((v) => { replace(kind, v.kind); replace(value, fmtNum(v.value)); })
          .catch((e) => { if (!ctx.handled(e)) replace(value, h('span', { class: 'error' }, e.code || 'error')); });
      }
      if (!body.children.length) body.append(h('tr', null, h('td', { colspan: 3, class: 'muted' }, 'no counters' + (prefix ? ' with this prefix' : ''))));
      replace(more, list.cursor ? h('button', { class: 'secondary', onclick: () => page(list.cursor) }, 'More') : '');
    } catch (e) {
      if (!ctx.handled(e)) replace(more, h('span', { class: 'error' }, errorText(e)));
    }
  }
  page(0);
}
