// #/counters?prefix=P&kind=K&sort=S: browse counters by id prefix (GET
// /counters, in byte order, paged with after/next), filter the loaded rows
// by kind and sort them by id or value, and show the prefix's aggregate
// (GET /counters/{prefix}*/aggregate). Values are exact (BigInt).
import { get, counterPath } from './api.js';
import { h, replace, fmtNum, cmpNum, errorText } from './dom.js';

const PAGE = 100;
export const KINDS = ['counter', 'sharded', 'pn', 'window', 'hll', 'hash', 'float'];
const SORTS = { 'id': 'id, A→Z', '-id': 'id, Z→A', '-value': 'value, largest first', 'value': 'value, smallest first' };

// shownValue is what a list row or a counter page shows as a counter's
// value: the exact integer, a float's text, a hash's field count.
export function shownValue(v) {
  if (!v.exists) return '—';
  if (v.kind === 'float') return String(v.value); // its decimal text
  if (v.kind === 'hash') {
    const n = Object.keys(v.fields || {}).length;
    return `${fmtNum(n)} field${n === 1 ? '' : 's'}`;
  }
  return fmtNum(v.value);
}

// sortValue is the integer a row sorts by (hash and float sort as 0).
function sortValue(v) {
  return v && v.exists && v.kind !== 'hash' && v.kind !== 'float' ? v.value : 0;
}

// aggregateText says what GET /counters/{prefix}*/aggregate answered; an
// overflowing sum still says how many counters it covers.
export function aggregateText(prefix, a) {
  const what = `${fmtNum(a.count)} counter${a.count === 1 ? '' : 's'}${prefix ? ` with prefix “${prefix}”` : ''}`;
  if (a.overflow) return `${what}, sum of additive values exceeds 64 bits (${fmtNum(a.sum)})`;
  return `${what}, sum of additive values ${fmtNum(a.value)}`;
}

function hashFor(prefix, kind, sort) {
  const q = new URLSearchParams();
  if (prefix) q.set('prefix', prefix);
  if (kind) q.set('kind', kind);
  if (sort && sort !== 'id') q.set('sort', sort);
  return '#/counters?' + q;
}

export function renderCounters(main, params, ctx) {
  const prefix = params.get('prefix') || '';
  const kind = KINDS.includes(params.get('kind')) ? params.get('kind') : '';
  const sort = SORTS[params.get('sort')] ? params.get('sort') : 'id';
  const input = h('input', { id: 'prefix', name: 'prefix', placeholder: 'id prefix, e.g. page_views:', value: prefix, size: 40, autocomplete: 'off' });
  const kindSel = h('select', { id: 'kind-filter', name: 'kind', 'aria-label': 'kind' },
    h('option', { value: '' }, 'every kind'), KINDS.map((k) => h('option', { value: k, selected: k === kind }, k)));
  const sortSel = h('select', { id: 'sort', name: 'sort', 'aria-label': 'sort' },
    Object.entries(SORTS).map(([k, label]) => h('option', { value: k, selected: k === sort }, 'sort by ' + label)));
  const go = () => { location.hash = hashFor(input.value, kindSel.value, sortSel.value); };
  const form = h('form', { class: 'inline', id: 'search', onsubmit: (ev) => { ev.preventDefault(); go(); } },
    input, kindSel, sortSel, h('button', { type: 'submit' }, 'Search'));
  kindSel.addEventListener('change', go);
  sortSel.addEventListener('change', go);
  const agg = h('p', { id: 'aggregate', class: 'muted' }, '…');
  const body = h('tbody');
  const more = h('p');
  const shown = h('p', { class: 'muted', id: 'list-note' });
  replace(main, h('h2', null, 'Counters'), form, agg,
    h('section', null, h('table', { id: 'counter-list' },
      h('thead', null, h('tr', null, h('th', null, 'id'), h('th', null, 'kind'), h('th', { class: 'num' }, 'value'))), body), shown, more));

  // overflow=report: a sum past 64 bits answers its count and exact sum.
  get('/counters/' + encodeURIComponent(prefix) + '*/aggregate?overflow=report', ctx.signal).then((a) => {
    replace(agg, a.overflow ? h('span', { id: 'aggregate-overflow' }, aggregateText(prefix, a)) : aggregateText(prefix, a));
  }).catch((e) => { if (!ctx.handled(e)) replace(agg, h('span', { class: 'error' }, errorText(e))); });

  // rows holds every loaded row: its id, its view once read, its <tr>.
  const rows = [];
  let listed = 0;
  function redraw() {
    const keep = rows.filter((r) => !kind || (r.view && r.view.kind === kind));
    if (sort === '-id') keep.reverse();
    else if (sort === 'value' || sort === '-value') {
      const sign = sort === 'value' ? 1 : -1;
      keep.sort((a, b) => sign * cmpNum(sortValue(a.view), sortValue(b.view)) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    }
    replace(body, keep.map((r) => r.tr));
    if (!keep.length) {
      body.append(h('tr', null, h('td', { colspan: 3, class: 'muted' },
        rows.length && kind ? `no ${kind} counters among those loaded` : 'no counters' + (prefix ? ' with this prefix' : ''))));
    }
    replace(shown, `${fmtNum(listed)} id${listed === 1 ? '' : 's'} loaded in byte order` +
      (kind ? `, ${fmtNum(keep.length)} of kind ${kind}` : '') + (sort !== 'id' ? `, shown by ${SORTS[sort]}` : ''));
  }

  async function page(after) {
    replace(more, h('span', { class: 'muted' }, 'loading…'));
    try {
      const q = new URLSearchParams({ limit: String(PAGE) });
      if (prefix) q.set('prefix', prefix);
      if (after) q.set('after', after);
      const list = await get('/counters?' + q, ctx.signal);
      const reads = [];
      for (const id of list.ids) {
        const kindCell = h('td', { class: 'muted' }, '…');
        const value = h('td', { class: 'num' }, '…');
        const r = { id, view: null, tr: h('tr', { 'data-id': id }, h('td', null, h('a', { href: '#/counter/' + encodeURIComponent(id) }, id)), kindCell, value) };
        rows.push(r);
        reads.push(get(counterPath(id), ctx.signal).then((v) => {
          r.view = v;
          r.tr.dataset.kind = v.kind;
          replace(kindCell, v.kind);
          replace(value, shownValue(v));
        }).catch((e) => { if (!ctx.handled(e)) replace(value, h('span', { class: 'error' }, e.code || 'error')); }));
      }
      listed += list.ids.length;
      redraw();
      replace(more, list.next ? h('button', { class: 'secondary', id: 'more', onclick: () => page(list.next) }, 'More') : '');
      await Promise.all(reads);
      if (kind || sort !== 'id') redraw(); // the views decide filter and order
    } catch (e) {
      if (!ctx.handled(e)) replace(more, h('span', { class: 'error' }, errorText(e)));
    }
  }
  page('');
}
