// The console's only way to the server: same-origin fetches of the HTTP
// API (docs/http-api.md), with the login form's token as a Bearer token.

const TOKEN_KEY = 'counterd.token';

export class APIError extends Error {
  constructor(status, code, message, detail) {
    super(message);
    this.status = status;
    this.code = code;
    this.detail = detail || {}; // the error object of the API's error body
  }
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;

// parseJSON is JSON.parse without the loss: an integer literal beyond
// JavaScript's safe integers (2^53) becomes a BigInt holding it exactly,
// where JSON.parse would round it (9223372036854775807 would read as
// 9223372036854775808). Other values are what JSON.parse makes of them;
// malformed text throws a SyntaxError as JSON.parse does.
export function parseJSON(text) {
  let i = 0;
  const fail = (what) => { throw new SyntaxError(`JSON: ${what} at offset ${i}`); };
  const ws = () => { while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++; };
  const expect = (c) => { ws(); if (text[i] !== c) fail(`expected ${c}`); i++; };
  function str() {
    const start = i++;
    for (; i < text.length; i++) {
      const c = text[i];
      if (c === '\\') i++;
      else if (c === '"') return JSON.parse(text.slice(start, ++i)); // escapes, control characters
    }
    return fail('unterminated string');
  }
  function num() {
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) fail('malformed number');
    i = NUMBER.lastIndex;
    if (m[1] === undefined && m[2] === undefined) {
      const n = Number(m[0]);
      return Number.isSafeInteger(n) ? n : BigInt(m[0]);
    }
    return Number(m[0]);
  }
  function value() {
    ws();
    const c = text[i];
    if (c === '"') return str();
    if (c === '-' || (c >= '0' && c <= '9')) return num();
    if (c === '{') {
      i++;
      const o = {};
      ws();
      if (text[i] === '}') { i++; return o; }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('expected a member name');
        const k = str();
        expect(':');
        // An own property even for "__proto__", as JSON.parse makes it.
        Object.defineProperty(o, k, { value: value(), enumerable: true, writable: true, configurable: true });
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === '}') { i++; return o; }
        fail('expected , or }');
      }
    }
    if (c === '[') {
      i++;
      const a = [];
      ws();
      if (text[i] === ']') { i++; return a; }
      for (;;) {
        a.push(value());
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === ']') { i++; return a; }
        fail('expected , or ]');
      }
    }
    for (const [w, v] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(w, i)) { i += w.length; return v; }
    }
    return fail(c === undefined ? 'unexpected end' : `unexpected ${JSON.stringify(c)}`);
  }
  const v = value();
  ws();
  if (i !== text.length) fail('text after the value');
  return v;
}

// stringifyJSON is JSON.stringify that writes a BigInt as its exact
// digits (request bodies with 64-bit values).
export function stringifyJSON(v) {
  const marks = [];
  const text = JSON.stringify(v, (_, x) => {
    if (typeof x !== 'bigint') return x;
    marks.push(x.toString());
    return `\u0000big${marks.length - 1}\u0000`;
  });
  return text.replace(/"\\u0000big([0-9]+)\\u0000"/g, (_, n) => marks[Number(n)]);
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

async function request(path, signal, parse, method = 'GET', body = undefined) {
  const headers = {};
  const t = getToken();
  if (t) headers.Authorization = 'Bearer ' + t;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, cache: 'no-store', signal, body: body === undefined ? undefined : stringifyJSON(body) });
  const text = await res.text();
  if (!res.ok) {
    let e = {};
    try { e = parseJSON(text).error || {}; } catch { /* not the API's error body */ }
    throw new APIError(res.status, e.code || 'http_' + res.status, e.message || res.statusText, e);
  }
  return parse(text);
}

// get answers the JSON of GET path, read losslessly (parseJSON);
// failures throw an APIError.
export function get(path, signal) {
  return request(path, signal, parseJSON);
}

// send sends body (a value, written by stringifyJSON) with method to path
// and answers the JSON reply; failures throw an APIError.
export function send(method, path, body, signal) {
  return request(path, signal, parseJSON, method, body);
}

// getText answers the body of GET path as text (Prometheus metrics).
export function getText(path, signal) {
  return request(path, signal, (t) => t);
}

// counterPath is /counters/{id} with the id escaped as one path segment.
export function counterPath(id, suffix = '') {
  return '/counters/' + encodeURIComponent(id) + suffix;
}
