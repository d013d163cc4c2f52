// #/cli: a command box for people who think in redis-cli. Each line is
// split like redis-cli splits its input and sent to POST /resp, which runs
// it through the RESP front end's dispatcher with this token's grants; the
// reply is shown as redis-cli shows it. Integers are exact (parseJSON).
import { send } from './api.js';
import { h, replace, errorText } from './dom.js';

// splitCommand splits a line into arguments as redis-cli does
// (sdssplitargs): blanks separate them; "double quotes" take \n \r \t \b
// \a \\ \" and \xHH escapes; 'single quotes' take \' only; a closing quote
// must end the argument. Unbalanced quotes throw a SyntaxError.
export function splitCommand(line) {
  const args = [];
  let i = 0;
  const blank = (c) => c === ' ' || c === '\n' || c === '\r' || c === '\t' || c === '\v' || c === '\f';
  const hex = (c) => /^[0-9a-fA-F]$/.test(c);
  for (;;) {
    while (i < line.length && blank(line[i])) i++;
    if (i >= line.length) return args;
    let cur = '', inDq = false, inSq = false;
    for (;;) {
      const c = line[i];
      if (inDq) {
        if (c === undefined) throw new SyntaxError('unbalanced double quotes');
        if (c === '\\' && line[i + 1] === 'x' && hex(line[i + 2] || '') && hex(line[i + 3] || '')) {
          cur += String.fromCharCode(parseInt(line.slice(i + 2, i + 4), 16));
          i += 4;
          continue;
        }
        if (c === '\\' && i + 1 < line.length) {
          const e = line[i + 1];
          cur += { n: '\n', r: '\r', t: '\t', b: '\b', a: '\x07' }[e] ?? e;
          i += 2;
          continue;
        }
        if (c === '"') {
          if (i + 1 < line.length && !blank(line[i + 1])) throw new SyntaxError('closing quote must be followed by a space');
          i++;
          break;
        }
        cur += c;
        i++;
      } else if (inSq) {
        if (c === undefined) throw new SyntaxError('unbalanced single quotes');
        if (c === '\\' && line[i + 1] === "'") {
          cur += "'";
          i += 2;
          continue;
        }
        if (c === "'") {
          if (i + 1 < line.length && !blank(line[i + 1])) throw new SyntaxError('closing quote must be followed by a space');
          i++;
          break;
        }
        cur += c;
        i++;
      } else {
        if (c === undefined || blank(c)) break;
        if (c === '"') inDq = true;
        else if (c === "'") inSq = true;
        else cur += c;
        i++;
      }
    }
    args.push(cur);
  }
}

// quoteArg writes an argument so that splitCommand reads it back.
export function quoteArg(a) {
  if (a !== '' && !/[\s"'\\]/.test(a) && /^[\x21-\x7e]*$/.test(a)) return a;
  let out = '"';
  for (const ch of a) {
    const c = ch.codePointAt(0);
    if (ch === '"' || ch === '\\') out += '\\' + ch;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (c < 0x20 || c === 0x7f) out += '\\x' + c.toString(16).padStart(2, '0');
    else out += ch;
  }
  return out + '"';
}

// replyLines renders a reply of POST /resp as redis-cli prints it.
export function replyLines(r, indent = '') {
  switch (r.type) {
    case 'status': return [r.value];
    case 'error': return ['(error) ' + r.value];
    case 'integer': return ['(integer) ' + r.value.toString()];
    case 'bulk': return [r.base64 !== undefined ? '(binary, base64) ' + r.base64 : JSON.stringify(r.value)];
    case 'nil': return ['(nil)'];
    case 'array': {
      if (!r.value.length) return ['(empty array)'];
      const w = String(r.value.length).length;
      const out = [];
      r.value.forEach((e, i) => {
        const head = `${String(i + 1).padStart(w)}) `;
        const sub = replyLines(e, indent + ' '.repeat(head.length));
        out.push(head + sub[0], ...sub.slice(1).map((l) => ' '.repeat(head.length) + l));
      });
      return out;
    }
    default: return [JSON.stringify(r)];
  }
}

const history = []; // this tab's commands, newest last

export function renderCLI(main, ctx) {
  const input = h('input', { id: 'cli-input', autocomplete: 'off', spellcheck: 'false', placeholder: 'INCRBY views:home 5', 'aria-label': 'command' });
  const out = h('div', { id: 'cli-output', class: 'cli-output', 'aria-live': 'polite' });
  let pos = history.length;
  const form = h('form', { class: 'inline', id: 'cli', onsubmit: async (ev) => {
    ev.preventDefault();
    const line = input.value;
    let args;
    try {
      args = splitCommand(line);
    } catch (e) {
      out.append(entry(line, ['(error) ' + e.message], 'error'));
      return;
    }
    if (!args.length) return;
    history.push(line);
    pos = history.length;
    input.value = '';
    const e = entry(line, ['…'], 'pending');
    out.append(e);
    try {
      const { reply } = await send('POST', '/resp', args, ctx.signal);
      fill(e, replyLines(reply), reply.type);
    } catch (err) {
      if (!ctx.handled(err)) fill(e, ['(error) ' + errorText(err)], 'error');
    }
    e.scrollIntoView({ block: 'nearest' });
  } }, h('span', { class: 'prompt' }, '>'), input, h('button', { type: 'submit', id: 'cli-run' }, 'Run'),
  h('button', { type: 'button', class: 'secondary', id: 'cli-clear', onclick: () => replace(out) }, 'Clear'));
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'ArrowUp' && pos > 0) { input.value = history[--pos]; ev.preventDefault(); }
    if (ev.key === 'ArrowDown' && pos < history.length) { pos++; input.value = history[pos] || ''; ev.preventDefault(); }
  });
  replace(main, h('h2', null, 'Commands'),
    h('section', null,
      h('p', { class: 'muted' }, 'Redis-protocol counter commands, as with redis-cli: INCR, INCRBY, GET, SET, MGET, DEL, EXPIRE, TTL, PFADD, PFCOUNT, HINCRBY, HGETALL, SCAN, … Each runs through the RESP front end with this token’s grants (POST /resp). Quote arguments with spaces: SET "a b" 1.'),
      form, out));
  input.focus();
}

function entry(line, lines, type) {
  const e = h('div', { class: 'entry' }, h('div', { class: 'cmd' }, '> ' + line), h('pre', { class: 'reply' }));
  fill(e, lines, type);
  return e;
}

function fill(e, lines, type) {
  const pre = e.querySelector('.reply');
  pre.className = 'reply ' + type;
  e.dataset.type = type;
  replace(pre, lines.join('\n'));
}
