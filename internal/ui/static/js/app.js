// The console's entry point: hash routes, the login form, and each view's
// lifetime (its requests and polling stop when the user navigates away).
import { get, getToken, setToken, APIError } from './api.js';
import { h, replace, errorText } from './dom.js';
import { renderCounters } from './counters.js';
import { renderCounter } from './counter.js';
import { renderCluster } from './cluster.js';
import { renderRateLimit } from './ratelimit.js';
import { renderCLI } from './cli.js';
import { renderNode } from './node.js';

const main = document.getElementById('main');
const session = document.getElementById('session');
let config = { auth: false, version: '' };
let current = null; // the shown view's AbortController

// viewContext is what a view gets: a signal aborted when it is left,
// every() for polling, and handled() for errors the app deals with.
function viewContext(ac) {
  return {
    signal: ac.signal,
    every(fn, ms) {
      const tick = async () => {
        if (ac.signal.aborted) return;
        await fn();
        if (!ac.signal.aborted) setTimeout(tick, ms);
      };
      tick();
    },
    handled(err) {
      if (ac.signal.aborted || (err && err.name === 'AbortError')) return true;
      if (err instanceof APIError && err.status === 401) {
        setToken('');
        showLogin('The server asked for a token: ' + err.message);
        return true;
      }
      return false;
    },
  };
}

function stopView() {
  if (current) current.abort();
  current = null;
}

let who = null; // GET /whoami of the current token, once read

// showSession says in the header who is logged in (GET /whoami) and
// offers to log out.
function showSession() {
  if (!config.auth) {
    replace(session, h('span', { class: 'muted', id: 'user' }, 'no authentication (loopback)'));
    return;
  }
  if (!getToken()) {
    who = null;
    replace(session, '');
    return;
  }
  const logout = h('button', { class: 'secondary', id: 'logout', onclick: () => { setToken(''); who = null; showLogin(''); } }, 'Log out');
  const user = h('span', { id: 'user' }, who ? who.user : '…');
  replace(session, h('span', { class: 'muted' }, 'logged in as '), user, ' ', logout);
  if (who) return;
  get('/whoami').then((w) => {
    who = w;
    replace(user, w.user);
    user.title = (w.grants || []).map((g) => `${g.pattern}: ${g.perm}`).join(', ');
  }).catch(() => { /* the view reports a refused token */ });
}

function showLogin(message) {
  stopView();
  showSession();
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'off', placeholder: 'bearer token', required: true });
  const msg = h('p', { id: 'login-error', class: 'error' }, message || '');
  const button = h('button', { type: 'submit', id: 'login-submit' }, 'Log in');
  const form = h('form', { id: 'login', onsubmit: async (ev) => {
    ev.preventDefault();
    button.disabled = true;
    setToken(input.value.trim());
    who = null;
    try {
      await get('/capabilities'); // any route that needs read: checks the token
      route();
    } catch (e) {
      setToken('');
      button.disabled = false;
      input.value = '';
      input.focus();
      replace(msg, e instanceof APIError && e.status === 401 ? 'Token refused: ' + e.message : errorText(e));
    }
  } }, h('label', { for: 'token' }, 'Token'), input, button, msg);
  replace(main, h('section', { class: 'login' }, h('h2', null, 'Log in'),
    h('p', { class: 'muted' }, 'This server runs with --auth. The token is kept in this tab only (sessionStorage) and sent as a Bearer token.'), form));
  input.focus();
}

function route() {
  stopView();
  if (config.auth && !getToken()) {
    showLogin('');
    return;
  }
  showSession();
  const hash = location.hash || '#/counters';
  const [path, query] = hash.slice(1).split('?');
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', path.startsWith('/' + a.dataset.nav));
  current = new AbortController();
  const ctx = viewContext(current);
  if (path.startsWith('/counter/')) renderCounter(main, decodeURIComponent(path.slice('/counter/'.length)), ctx);
  else if (path === '/cluster') renderCluster(main, ctx);
  else if (path === '/ratelimit') renderRateLimit(main, ctx);
  else if (path === '/cli') renderCLI(main, ctx);
  else if (path === '/node') renderNode(main, ctx);
  else renderCounters(main, new URLSearchParams(query || ''), ctx);
}

async function start() {
  try {
    config = await get('/ui/config.json');
  } catch (e) {
    replace(main, h('p', { class: 'error' }, 'Cannot reach the server: ' + errorText(e)));
    return;
  }
  replace(document.getElementById('footer'), `counterd ${config.version}`);
  window.addEventListener('hashchange', route);
  route();
}

start();
