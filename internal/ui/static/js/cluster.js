// #/cluster: members, ring ownership (GET /cluster) and this node's
// replication figures (GET /cluster/metrics), refreshed every 2 s.
import { get, getText } from './api.js';
import { h, replace, fmtNum, errorText } from './dom.js';

const POLL_MS = 2000;

// metricSums parses Prometheus text and sums each metric over its labels.
export function metricSums(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const v = Number(m[3]);
    if (!Number.isNaN(v)) out[m[1]] = (out[m[1]] || 0) + v;
  }
  return out;
}

export async function renderCluster(main, ctx) {
  replace(main, h('h2', null, 'Cluster'), h('p', { class: 'muted' }, 'loading…'));
  let caps;
  try {
    caps = await get('/capabilities', ctx.signal);
  } catch (e) {
    if (!ctx.handled(e)) replace(main, h('h2', null, 'Cluster'), h('p', { class: 'error' }, errorText(e)));
    return;
  }
  if (caps.mode !== 'cluster') {
    replace(main, h('h2', null, 'Cluster'),
      h('section', { id: 'cluster-mode' }, h('p', null, `This server runs in ${caps.mode} mode: it has no peer cluster, ring or replication. `,
        'Start counterd with --join to form one (docs/cluster.md).')));
    return;
  }
  const summary = h('dl', { class: 'kv', id: 'cluster-summary' });
  const body = h('tbody');
  const note = h('p', { class: 'muted' });
  replace(main, h('h2', null, 'Cluster'),
    h('section', null, summary),
    h('section', null, h('h3', null, 'Members'), h('table', { id: 'members' },
      h('thead', null, h('tr', null, ['id', 'state', 'http', 'resp', 'grpc', 'gossip'].map((c) => h('th', null, c)), h('th', null, 'ring ownership'))), body), note));
  ctx.every(async () => {
    try {
      const [st, text] = await Promise.all([get('/cluster', ctx.signal), getText('/cluster/metrics', ctx.signal)]);
      const m = metricSums(text);
      const lag = m.counterd_cluster_replication_lag_seconds || 0;
      replace(summary,
        h('dt', null, 'this node'), h('dd', null, st.self),
        h('dt', null, 'ring version'), h('dd', null, String(st.ring_version)),
        h('dt', null, 'virtual nodes'), h('dd', null, String(st.vnodes)),
        h('dt', null, 'replication factor'), h('dd', null, String(st.replication_factor)),
        h('dt', null, 'replication lag'), h('dd', { id: 'replication-lag', class: lag > 1 ? 'bad' : 'ok' }, `${lag.toFixed(3)} s (oldest change not yet acknowledged by its replicas)`),
        h('dt', null, 'forwarded requests'), h('dd', null, fmtNum(m.counterd_cluster_forwarded_total || 0)),
        h('dt', null, 'anti-entropy repairs'), h('dd', null, fmtNum(m.counterd_cluster_anti_entropy_repairs_total || 0)),
        (st.forgotten || []).length ? [h('dt', null, 'forgotten'), h('dd', null, st.forgotten.join(', '))] : null);
      replace(body, (st.members || []).map((mem) => h('tr', { 'data-member': mem.id },
        h('td', null, mem.id === st.self ? [mem.id, ' ', h('span', { class: 'muted' }, '(this node)')] : mem.id),
        h('td', { class: mem.state === 'alive' ? 'ok' : 'bad' }, mem.state),
        h('td', null, mem.http || ''), h('td', null, mem.resp || ''), h('td', null, mem.grpc || ''), h('td', null, mem.gossip || ''),
        h('td', null, h('span', { class: 'meter', style: undefined, 'data-share': mem.ownership }), ` ${(mem.ownership * 100).toFixed(1)}%`))));
      // Widths are set through the DOM: the CSP allows no inline style attribute.
      for (const el of body.querySelectorAll('.meter')) el.style.width = (Number(el.dataset.share) * 200).toFixed(0) + 'px';
      replace(note, 'Replication lag and counts are this node’s; open another member’s console (its http address, /ui/) for its own.');
    } catch (e) {
      if (!ctx.handled(e)) replace(note, h('span', { class: 'error' }, errorText(e)));
    }
  }, POLL_MS);
}
