// Small DOM helpers. Text from the API (counter ids, keys, messages) only
// ever reaches the page as text nodes or attribute values, never as HTML.

const SVG = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// h('a', {href: '#/x', class: 'y'}, 'text', child...) builds an element.
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// s() is h() for SVG elements.
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

// replace sets el's children.
export function replace(el, ...children) {
  el.replaceChildren();
  return build(el, null, children);
}

// group puts thousands separators into a decimal integer's digits.
function group(digits) {
  const neg = digits.startsWith('-');
  const d = neg ? digits.slice(1) : digits;
  return (neg ? '-' : '') + d.replace(/\B(?=([0-9]{3})+$)/g, ',');
}

// fmtNum formats a number exactly: a BigInt or a string of decimal digits
// (64-bit values, parseJSON) digit for digit with thousands separators;
// a safe integer the same way; other numbers as toLocaleString does.
export function fmtNum(n) {
  if (typeof n === 'bigint') return group(n.toString());
  if (typeof n === 'string' && /^-?[0-9]+$/.test(n)) return group(n);
  if (typeof n === 'number' && Number.isSafeInteger(n)) return group(String(n));
  return typeof n === 'number' ? n.toLocaleString('en-US') : String(n ?? '');
}

// cmpNum compares two integers given as numbers, BigInts or digit strings,
// exactly.
export function cmpNum(a, b) {
  const x = BigInt(a ?? 0), y = BigInt(b ?? 0);
  return x < y ? -1 : x > y ? 1 : 0;
}

export function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export function errorText(err) {
  return err && err.code ? `${err.message} (${err.code}, HTTP ${err.status})` : String(err && err.message || err);
}
