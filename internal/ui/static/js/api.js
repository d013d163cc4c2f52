// The console's only way to the server: same-origin fetches of the HTTP
// API (docs/http-api.md), with the login form's token as a Bearer token.

const TOKEN_KEY = 'counterd.token';

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

async function request(path, signal, parse) {
  const headers = {};
  const t = getToken();
  if (t) headers.Authorization = 'Bearer ' + t;
  const res = await fetch(path, { headers, cache: 'no-store', signal });
  const text = await res.text();
  if (!res.ok) {
    let e = {};
    try { e = JSON.parse(text).error || {}; } catch { /* not the API's error body */ }
    throw new APIError(res.status, e.code || 'http_' + res.status, e.message || res.statusText);
  }
  return parse(text);
}

// get answers the JSON of GET path; failures throw an APIError.
export function get(path, signal) {
  return request(path, signal, (t) => JSON.parse(t));
}

// getText answers the body of GET path as text (Prometheus metrics).
export function getText(path, signal) {
  return request(path, signal, (t) => t);
}

// counterPath is /counters/{id} with the id escaped as one path segment.
export function counterPath(id, suffix = '') {
  return '/counters/' + encodeURIComponent(id) + suffix;
}
