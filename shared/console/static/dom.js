// Building the page. Everything the API says — labels, ids, owners, messages, log lines — goes
// in as text nodes (h's children, textContent), never as markup: a label
// "<img src=x onerror=...>" shows as those characters.

// h makes an element: attrs are attributes (class, href, ...; on<event> listeners), children
// are nodes, or anything else shown as its text. null, undefined and false are left out.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, ...children);
  return el;
}

export function append(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// replace puts children in place of everything el held.
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, ...children);
}

// link is an address inside the console: path segments are escaped, so an id is never read
// as a path or a scheme.
export function consoleURL(segments, query) {
  let u = '/console/' + segments.map(encodeURIComponent).join('/');
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? u + '?' + s : u;
}

export function runLink(runID, owner) {
  return h('a', { href: consoleURL(['runs', runID], { owner }), class: 'run-link' }, runID);
}

export function nodeLink(nodeID) {
  return h('a', { href: consoleURL(['nodes', nodeID]), class: 'node-link' }, nodeID);
}

// badge shows a state, reason or kind exactly as the API spells it.
export function badge(value, kind) {
  if (value === null || value === undefined || value === '') return '';
  return h('span', { class: 'badge ' + (kind || '') + ' v-' + String(value).replace(/[^A-Za-z0-9_-]/g, '') }, value);
}

// when is a timestamp as the API gives it, shortened to the local time, with the full one
// as the element's title.
export function when(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  if (isNaN(d)) return String(ts);
  return h('time', { datetime: ts, title: ts }, d.toLocaleString());
}

export function ago(ts) {
  if (!ts) return '';
  const s = (Date.now() - new Date(ts).getTime()) / 1000;
  return h('time', { datetime: ts, title: ts }, duration(s) + ' ago');
}

export function duration(s) {
  if (s === null || s === undefined || isNaN(s)) return '';
  if (s < 0) s = 0;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.floor(s % 60) + ' s';
  if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
}

export function table(headers, rows, attrs) {
  return h('table', attrs || {},
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows));
}

export function message(text, kind) {
  return h('p', { class: 'message ' + (kind || '') }, text);
}
