// The console: one page whose address says the view (/console/ the fleet, /console/queue,
// /console/runs, /console/runs/<run_id>, /console/nodes/<node_id>). Each view reads the public
// API as the person signed in, renders, and reads again every few seconds while the tab is
// visible; a hidden tab makes no calls.
import { h, append, replace, consoleURL, runLink, nodeLink, badge, when, ago, duration, table, message } from './dom.js';
import { api, APIError, loadConfig, token, setToken, signOut, startSignIn, finishSignIn, whenUnauthenticated, calls } from './auth.js';

const view = document.getElementById('view');
const REFRESH_MS = 2000;
const PAGE = 100; // the fleet's rows a page: 10,000 nodes stay a quick page

let current = null; // the view shown: { name, stop() }
let generation = 0;

// rendered marks a view's first render, for the bench (performance.now() at the mark) and the
// tests (data-rendered on <body>).
function rendered(name) {
  if (document.body.dataset.rendered === name) return;
  performance.mark('console:rendered:' + name);
  document.body.dataset.rendered = name;
  window.__consoleRendered = { view: name, at: performance.now(), calls: calls.total };
}

// every runs load now and again every REFRESH_MS while the tab is visible, until the view
// changes. A load that fails shows why and is tried again.
function every(gen, load, ms = REFRESH_MS) {
  let timer = null;
  const tick = async () => {
    timer = null;
    if (gen !== generation) return;
    if (document.visibilityState === 'visible') {
      try { await load(); } catch (e) { showError(e); }
    }
    if (gen === generation && document.visibilityState === 'visible') timer = setTimeout(tick, ms);
  };
  const onVisible = () => { if (document.visibilityState === 'visible' && timer === null && gen === generation) tick(); };
  document.addEventListener('visibilitychange', onVisible);
  tick();
  return () => { if (timer) clearTimeout(timer); timer = null; document.removeEventListener('visibilitychange', onVisible); };
}

function showError(e) {
  if (e && e.quiet) return; // the view already says what is wrong
  let box = document.getElementById('error');
  if (!box) {
    box = h('p', { id: 'error', class: 'message error' });
    view.prepend(box);
  }
  box.textContent = e instanceof APIError ? (e.status + ' ' + (e.problem.code || '') + ': ' + e.message) : String(e && e.message || e);
}

function clearError() { const b = document.getElementById('error'); if (b) b.remove(); }

// ---- routing ----

function route() {
  const path = location.pathname.replace(/^\/console\/?/, '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) return ['fleet'];
  if (parts[0] === 'queue' && parts.length === 1) return ['queue'];
  if (parts[0] === 'runs' && parts.length === 1) return ['runs'];
  if (parts[0] === 'runs' && parts.length === 2) return ['run', parts[1]];
  if (parts[0] === 'nodes' && parts.length === 2) return ['node', parts[1]];
  if (parts[0] === 'callback') return ['callback'];
  return ['missing'];
}

async function show() {
  if (current) current.stop();
  current = null;
  const gen = ++generation;
  delete document.body.dataset.rendered;
  const [name, arg] = route();
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.view === name || (name === 'run' && a.dataset.view === 'runs'));
  if (name === 'callback') return callback();
  if (!token()) return signIn();
  document.getElementById('signout').classList.remove('hidden');
  const views = { fleet, queue, runs, run, node, missing };
  replace(view);
  const stop = views[name](gen, arg);
  current = { name, stop: stop || (() => {}) };
}

function go(href) {
  history.pushState(null, '', href);
  show();
}

document.addEventListener('click', (ev) => {
  const a = ev.target.closest && ev.target.closest('a[href]');
  if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || a.target) return;
  const u = new URL(a.href, location.href);
  if (u.origin !== location.origin || !u.pathname.startsWith('/console')) return;
  ev.preventDefault();
  go(u.pathname + u.search);
});
window.addEventListener('popstate', show);
document.getElementById('signout').addEventListener('click', () => { signOut(); go('/console/'); });
whenUnauthenticated(() => { generation++; if (current) current.stop(); current = null; signIn('Your sign-in is no longer accepted: sign in again.'); });

// ---- signing in ----

async function signIn(note) {
  document.getElementById('signout').classList.add('hidden');
  replace(view);
  let c;
  try { c = await loadConfig(); } catch (e) { return replace(view, message(String(e), 'error')); }
  const box = h('section', { class: 'signin' }, h('h1', {}, 'Sign in'));
  if (note) append(box, message(note, 'warn'));
  if (c.sign_in === 'iam') {
    append(box,
      message('This stack authorizes people with IAM (SigV4-signed requests), which a browser page cannot sign. ' +
        'The console needs a stack deployed with AuthorizerType=JWT; here, use the mediator command line.', 'iam'),
      h('pre', {}, 'mediator --url ' + location.origin + ' runs'));
    view.append(box);
    rendered('signin');
    return;
  }
  if (c.sign_in === 'jwt' && c.authorize_url) {
    append(box, h('p', {}, h('button', { type: 'button', id: 'oauth', onclick: () => startSignIn(location.pathname + location.search) }, 'Sign in with your organisation')),
      h('p', { class: 'muted' }, 'or paste an access token:'));
  }
  // POST, should the form ever be sent without this script's handler: a token never goes
  // into an address.
  const form = h('form', { id: 'signin', method: 'post', action: '/console/signin', autocomplete: 'off' },
    h('label', {}, c.sign_in === 'jwt' ? 'Access token ' : 'Token ',
      h('input', { type: 'password', name: 'token', required: true, autofocus: true, spellcheck: 'false', autocomplete: 'off' })),
    h('button', { type: 'submit' }, 'Sign in'));
  if (c.sign_in !== 'jwt') append(box, h('p', { class: 'muted' }, 'Locally (make dev): dev-admin, dev-client or dev-client-<name>.'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = form.elements.token.value.trim();
    if (!t) return;
    setToken(t);
    show();
  });
  append(box, form);
  view.append(box);
  rendered('signin');
}

async function callback() {
  replace(view, message('Signing in…'));
  try {
    const back = await finishSignIn(new URLSearchParams(location.search));
    history.replaceState(null, '', back); // the code leaves the address
    show();
  } catch (e) {
    history.replaceState(null, '', '/console/');
    replace(view, message(String(e.message || e), 'error'));
  }
}

function missing() {
  append(view, h('h1', {}, 'Not here'), h('p', {}, 'The console has no page at this address. ', h('a', { href: '/console/' }, 'The fleet')));
  rendered('missing');
}

// ---- fleet ----

const NODE_STATES = ['idle', 'leased', 'draining', 'offline'];
const HEALTHS = ['healthy', 'suspect', 'quarantined'];

function counts(items, key, order) {
  const n = {};
  for (const k of order) n[k] = 0;
  for (const it of items) n[it[key]] = (n[it[key]] || 0) + 1;
  return n;
}

function summary(title, n, cls) {
  return h('div', { class: 'summary ' + cls }, h('span', { class: 'summary-title' }, title),
    Object.entries(n).map(([k, v]) => h('span', { class: 'count', 'data-count': k }, badge(k), ' ', h('b', {}, v))));
}

function drainText(n) {
  if (!n.draining) return '';
  return n.drain_requested_by ? 'drained by ' + n.drain_requested_by : 'draining (its own)';
}

function fleet(gen) {
  const params = new URLSearchParams(location.search);
  let page = Math.max(0, parseInt(params.get('page') || '0', 10) || 0);
  const head = h('div', { id: 'fleet-summary' });
  const stateSel = h('select', { name: 'state' }, h('option', { value: '' }, 'every state'), NODE_STATES.map((s) => h('option', { value: s }, s)));
  stateSel.value = params.get('state') || '';
  const labelIn = h('input', { type: 'search', name: 'label', placeholder: 'label, e.g. board=rpi4', value: params.get('label') || '' });
  const body = h('div', { id: 'fleet-table' });
  append(view, h('h1', {}, 'Fleet'), head, h('div', { class: 'filters' }, labelIn, ' ', stateSel), body);
  let nodes = null;

  const draw = () => {
    if (!nodes) return;
    const st = stateSel.value, lf = labelIn.value.trim();
    const q = {};
    if (st) q.state = st;
    if (lf) q.label = lf;
    const shown = nodes.filter((n) => (!st || n.state === st) && (!lf || n.labels.some((l) => l === lf || l.includes(lf))));
    const pages = Math.max(1, Math.ceil(shown.length / PAGE));
    if (page >= pages) page = pages - 1;
    if (page) q.page = page;
    const addr = consoleURL([], q);
    if (addr !== location.pathname + location.search) history.replaceState(null, '', addr);
    const rows = shown.slice(page * PAGE, page * PAGE + PAGE).map((n) => h('tr', { 'data-node': n.node_id },
      h('td', {}, nodeLink(n.node_id)),
      h('td', { class: 'state' }, badge(n.state, 'state')),
      h('td', { class: 'health' }, badge(n.health, 'health'), n.health_reason ? h('span', { class: 'muted' }, ' ' + n.health_reason) : ''),
      h('td', { class: 'drain' }, drainText(n)),
      h('td', { class: 'labels' }, n.labels.map((l) => h('span', { class: 'label' }, l))),
      h('td', { class: 'lease' }, n.run_id ? [runLink(n.run_id, n.run_owner), n.role ? ' as ' + n.role : '', n.leased_at ? [', leased ', ago(n.leased_at)] : ''] : ''),
      h('td', {}, ago(n.last_seen_at))));
    const pager = h('div', { class: 'pager' },
      h('button', { type: 'button', disabled: page === 0, onclick: () => { page--; draw(); } }, '‹ previous'),
      h('span', { class: 'muted' }, shown.length ? ` nodes ${page * PAGE + 1}–${Math.min(shown.length, page * PAGE + PAGE)} of ${shown.length} ` : ' no node matches '),
      h('button', { type: 'button', disabled: page >= pages - 1, onclick: () => { page++; draw(); } }, 'next ›'));
    replace(body, table(['node', 'state', 'health', 'drain', 'labels', 'run (role)', 'last heartbeat'], rows, { id: 'nodes' }), pager);
  };
  stateSel.addEventListener('change', () => { page = 0; draw(); });
  labelIn.addEventListener('input', () => { page = 0; draw(); });

  return every(gen, async () => {
    const all = [];
    try {
      // The fleet comes a page at a time (up to 1,000 nodes, under the answer's size limit).
      for (let after = ''; ;) {
        const page = await api('/v1/nodes' + (after ? '?after=' + encodeURIComponent(after) : ''));
        if (gen !== generation) return;
        all.push(...page.nodes);
        if (!page.next) break;
        after = page.next;
      }
    } catch (e) {
      if (gen !== generation) return;
      if (e instanceof APIError && e.status === 403) {
        replace(view, h('h1', {}, 'Fleet'), message('The fleet is for admins: you are signed in as a client. Your runs and the queue are yours to see.', 'forbidden'),
          h('p', {}, h('a', { href: '/console/runs' }, 'Your runs'), ' · ', h('a', { href: '/console/queue' }, 'The queue')));
        rendered('fleet');
        throw Object.assign(new Error('forbidden'), { quiet: true });
      }
      throw e;
    }
    if (gen !== generation) return;
    clearError();
    nodes = all;
    replace(head, summary('state', counts(nodes, 'state', NODE_STATES), 'by-state'), summary('health', counts(nodes, 'health', HEALTHS), 'by-health'),
      h('span', { class: 'muted' }, nodes.length + ' nodes'));
    draw();
    rendered('fleet');
  });
}

// ---- queue ----

function waitingCell(w) {
  if (!w) return '';
  return h('div', { class: 'waiting' }, badge(w.reason, 'reason'), (w.roles || []).map(roleCounts));
}

function roleCounts(r) {
  const keys = ['available', 'busy', 'held', 'checking', 'draining', 'quarantined', 'offline'];
  return h('div', { class: 'role-counts', 'data-role': r.role },
    h('b', {}, r.role), ' ', (r.needs || []).map((l) => h('span', { class: 'label' }, l)), ' ',
    keys.filter((k) => r[k] !== undefined).map((k) => h('span', { class: 'count' }, k + ' ', h('b', {}, r[k]), ' ')),
    (r.busy_runs || []).length ? h('span', { class: 'muted' }, ' busy with ', r.busy_runs.map((b, i) => [i ? ', ' : '', runLink(b.run_id, b.owner), b.owner ? ' (' + b.owner + ')' : ''])) : '');
}

function queue(gen) {
  const head = h('div', { id: 'queue-summary' });
  const body = h('div', { id: 'queue-table' });
  append(view, h('h1', {}, 'Queue'), head, body);
  return every(gen, async () => {
    const data = await api('/v1/queue');
    if (gen !== generation) return;
    clearError();
    replace(head, data.fleet ? h('p', {}, 'Fleet: ', h('b', {}, data.fleet.nodes), ' nodes, ', h('b', {}, data.fleet.live), ' live') : '',
      h('p', { class: 'muted' }, data.queue.length ? runsWaiting(data.queue.reduce((s, e) => s + e.queued, 0)) + ', in ' + count(data.queue.length, 'shape') : 'Nothing waits.'));
    const rows = data.queue.map((e) => h('tr', {},
      h('td', {}, e.needs.map((ls, i) => h('div', { class: 'needs' }, 'role ' + (i + 1) + ': ', ls.map((l) => h('span', { class: 'label' }, l))))),
      h('td', {}, h('b', {}, e.queued), ' ', (e.priorities || []).map((p) => h('div', { class: 'muted' }, 'priority ' + p.priority + ': ' + p.queued))),
      h('td', {}, duration(e.oldest_wait_seconds), e.oldest_run_id ? [' ', runLink(e.oldest_run_id, e.oldest_run_owner)] : ''),
      h('td', {}, waitingCell(e.waiting)),
      h('td', {}, 'capable ' + e.capable_nodes + ', free ' + e.available_nodes, e.live_nodes !== undefined ? ', live ' + e.live_nodes : '', e.placeable_now ? h('div', {}, badge('placeable now')) : '')));
    replace(body, table(['needs', 'waiting', 'oldest wait', 'why', 'nodes'], rows, { id: 'queue' }));
    rendered('queue');
  });
}

// ---- runs ----

const RUN_STATES = ['QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
const KINDS = ['run', 'health_check', 'hold'];

function runs(gen) {
  const params = new URLSearchParams(location.search);
  const stateSel = h('select', { name: 'state' }, h('option', { value: '' }, 'every state'), RUN_STATES.map((s) => h('option', { value: s }, s)));
  stateSel.value = params.get('state') || '';
  const kindSel = h('select', { name: 'kind' }, h('option', { value: '' }, 'every kind'), KINDS.map((s) => h('option', { value: s }, s)));
  kindSel.value = params.get('kind') || '';
  const body = h('div', { id: 'runs-table' });
  append(view, h('h1', {}, 'Runs'), h('div', { class: 'filters' }, stateSel, ' ', kindSel), body);
  const refilter = () => go(consoleURL(['runs'], { state: stateSel.value, kind: kindSel.value }));
  stateSel.addEventListener('change', refilter);
  kindSel.addEventListener('change', refilter);
  const after = params.get('after');
  return every(gen, async () => {
    const q = new URLSearchParams({ limit: '50' });
    for (const k of ['state', 'kind']) if (params.get(k)) q.set(k, params.get(k));
    if (after) q.set('after', after);
    const data = await api('/v1/runs?' + q);
    if (gen !== generation) return;
    clearError();
    const admin = data.runs.some((r) => r.owner !== undefined);
    const rows = data.runs.map((r) => h('tr', { 'data-run': r.run_id },
      h('td', { class: 'state' }, badge(r.state, 'state')),
      h('td', {}, runLink(r.run_id, r.owner)),
      admin ? h('td', {}, r.owner || '') : null,
      h('td', {}, badge(r.kind, 'kind')),
      h('td', {}, badge(r.reason, 'reason'), r.waiting ? badge(r.waiting.reason, 'reason') : ''),
      h('td', {}, r.priority),
      h('td', {}, when(r.created_at)), h('td', {}, when(r.started_at)), h('td', {}, when(r.finished_at))));
    const headers = ['state', 'run', admin ? 'owner' : null, 'kind', 'reason', 'priority', 'created', 'started', 'finished'].filter((x) => x !== null);
    const nav = h('div', { class: 'pager' },
      after ? h('a', { href: consoleURL(['runs'], { state: params.get('state'), kind: params.get('kind') }) }, '« newest') : '',
      data.next ? [' ', h('a', { href: consoleURL(['runs'], { state: params.get('state'), kind: params.get('kind'), after: data.next }), id: 'next' }, 'older ›')] : '');
    replace(body, data.runs.length ? table(headers, rows, { id: 'runs' }) : message('No run.'), nav);
    rendered('runs');
  });
}

// ---- one run ----

function runPath(id, owner, tail) {
  const q = owner ? '?owner=' + encodeURIComponent(owner) : '';
  return '/v1/runs/' + encodeURIComponent(id) + (tail || '') + q;
}

function run(gen, runID) {
  const owner = new URLSearchParams(location.search).get('owner') || '';
  const head = h('section', { id: 'run-head' });
  const actions = h('div', { class: 'actions', id: 'run-actions' });
  const waiting = h('section', { id: 'run-waiting' });
  const roles = h('section', { id: 'run-roles' });
  const steps = h('section', { id: 'run-steps' });
  const outputs = h('section', { id: 'run-outputs' });
  const logs = h('section', { id: 'run-logs' });
  const history = h('section', { id: 'run-history' });
  append(view, h('h1', {}, 'Run ', h('span', { id: 'run-id' }, runID)), head, actions, waiting, roles, steps, logs, outputs, history);
  const followers = new Map(); // step id → its log's follower
  let actionState = '';

  const stopRefresh = every(gen, async () => {
    const data = await api(runPath(runID, owner));
    if (gen !== generation) return;
    clearError();
    const r = data.run;
    const admin = r.owner !== undefined;
    replace(head, h('dl', { class: 'facts' },
      fact('state', badge(r.state, 'state'), 'run-state'),
      fact('kind', badge(r.kind, 'kind')),
      admin ? fact('owner', r.owner) : null,
      fact('priority', r.priority),
      r.reason ? fact('reason', badge(r.reason, 'reason'), 'run-reason') : null,
      r.cancel_reason ? fact('cancel reason', r.cancel_reason) : null,
      r.queue_position !== undefined ? fact('queue position', r.queue_position) : null,
      fact('attempt', r.attempt + ' of ' + r.max_attempts),
      fact('created', when(r.created_at)), fact('started', when(r.started_at)), fact('finished', when(r.finished_at)),
      r.hold_ends_at ? fact('hold ends', when(r.hold_ends_at)) : null));
    const live = r.state === 'QUEUED' || r.state === 'RUNNING';
    const key = r.state + '|' + admin;
    if (key !== actionState) {
      actionState = key;
      replace(actions,
        live ? h('button', { type: 'button', id: 'cancel', onclick: () => act(() => api(runPath(runID, owner, '/cancel'), { method: 'POST', body: {} })) }, 'Cancel') : '',
        live && admin && r.state === 'QUEUED' ? priorityForm(runID, owner, r.priority) : '');
    }
    replace(waiting, r.state === 'QUEUED' && r.waiting ? [h('h2', {}, 'Why it waits'), h('p', {}, badge(r.waiting.reason, 'reason'), h('span', { id: 'waiting-reason', class: 'hidden' }, r.waiting.reason)), (r.waiting.roles || []).map(roleCounts)] : '');
    replace(roles, h('h2', {}, 'Roles'), table(['role', 'needs', 'node'], Object.entries(r.roles).map(([name, role]) => h('tr', {},
      h('td', {}, name), h('td', {}, role.needs.map((l) => h('span', { class: 'label' }, l))), h('td', {}, role.node_id ? nodeLink(role.node_id) : '')))));
    replace(steps, r.steps.length ? [h('h2', {}, 'Steps'), timeline(r.steps)] : '');
    const outs = r.steps.filter((s) => s.outputs && Object.keys(s.outputs).length);
    replace(outputs, outs.length ? [h('h2', {}, 'Outputs'), table(['step', 'key', 'value'], outs.flatMap((s) => Object.entries(s.outputs).map(([k, v]) => h('tr', {}, h('td', {}, s.id), h('td', {}, k), h('td', {}, v)))))] : '');
    replace(history, h('h2', {}, 'History'), table(['at', 'attempt', 'event', 'from', 'to', 'reason', 'node'], data.history.map((e) => h('tr', {},
      h('td', {}, when(e.at)), h('td', {}, e.attempt), h('td', {}, badge(e.kind, 'event')), h('td', {}, e.from ? badge(e.from, 'state') : ''), h('td', {}, badge(e.to, 'state')),
      h('td', {}, e.reason ? badge(e.reason, 'reason') : ''), h('td', {}, e.node_id ? nodeLink(e.node_id) : '')))));
    if (!logs.firstChild && r.steps.length) logs.append(h('h2', {}, 'Logs'));
    for (const s of r.steps) {
      if (s.state === 'PENDING' && !s.started_at && !followers.has(s.id)) continue;
      if (!followers.has(s.id)) {
        const f = new LogFollower(runID, owner, s.id, r.attempt);
        followers.set(s.id, f);
        logs.append(f.el);
      }
      followers.get(s.id).follow(s.state, r.attempt, gen);
    }
    rendered('run');
  });
  return () => { stopRefresh(); for (const f of followers.values()) f.stop(); };
}

function fact(name, value, id) {
  return [h('dt', {}, name), h('dd', id ? { id } : {}, value)];
}

async function act(fn) {
  try { await fn(); clearError(); } catch (e) { showError(e); }
}

function priorityForm(runID, owner, priority) {
  const input = h('input', { type: 'number', name: 'priority', min: 0, max: 100, value: priority });
  const form = h('form', { id: 'priority', class: 'inline' }, h('label', {}, 'priority ', input), h('button', { type: 'submit' }, 'Set priority'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    act(() => api(runPath(runID, owner, '/priority'), { method: 'POST', body: { priority: parseInt(input.value, 10) } }));
  });
  return form;
}

// timeline is the steps with a bar each from start to end, scaled to the run's span.
function timeline(steps) {
  const now = Date.now();
  const starts = steps.filter((s) => s.started_at).map((s) => Date.parse(s.started_at));
  const t0 = starts.length ? Math.min(...starts) : now;
  const t1 = Math.max(t0 + 1000, ...steps.map((s) => s.finished_at ? Date.parse(s.finished_at) : (s.started_at ? now : t0)));
  const rows = steps.map((s) => {
    const bar = h('div', { class: 'bar v-' + s.state });
    if (s.started_at) {
      const a = Date.parse(s.started_at), b = s.finished_at ? Date.parse(s.finished_at) : now;
      bar.style.left = ((a - t0) / (t1 - t0) * 100).toFixed(2) + '%';
      bar.style.width = Math.max(0.5, (b - a) / (t1 - t0) * 100).toFixed(2) + '%';
    } else {
      bar.style.width = '0';
    }
    const took = s.started_at ? duration(((s.finished_at ? Date.parse(s.finished_at) : now) - Date.parse(s.started_at)) / 1000) : '';
    return h('tr', { 'data-step': s.id },
      h('td', {}, s.id), h('td', {}, s.role), h('td', { class: 'state' }, badge(s.state, 'state')),
      h('td', {}, s.tries, s.retries ? ' (retries ' + s.retries + ')' : ''), h('td', {}, s.exit_code === null ? '' : s.exit_code),
      h('td', { class: 'span' }, h('div', { class: 'track' }, bar), h('span', { class: 'muted' }, took)),
      h('td', { class: 'step-message' }, s.message || ''));
  });
  return table(['step', 'role', 'state', 'tries', 'exit', 'time', 'message'], rows, { id: 'steps' });
}

// LogFollower shows a step's log and, while the step runs, appends what its node uploads: the
// API lists the chunks past what was read (from=), each a presigned URL on the log bucket.
class LogFollower {
  constructor(runID, owner, stepID, attempt) {
    this.runID = runID; this.owner = owner; this.stepID = stepID; this.attempt = attempt;
    this.read = 0;
    this.done = false;
    this.busy = false;
    this.decoder = new TextDecoder();
    this.pre = h('pre', { class: 'log', 'data-log': stepID });
    this.status = h('span', { class: 'muted' });
    this.el = h('div', { class: 'step-log' }, h('h3', {}, 'Step ', h('span', {}, stepID), ' ', this.status), this.pre);
  }

  stop() { this.done = true; }

  async follow(state, attempt, gen) {
    if (this.done || this.busy) return;
    if (attempt !== this.attempt) { // a new attempt's log starts over
      this.attempt = attempt; this.read = 0; this.decoder = new TextDecoder(); this.pre.textContent = '';
    }
    this.busy = true;
    try {
      let more = true;
      while (more && gen === generation) {
        const q = new URLSearchParams({ attempt: String(this.attempt), from: String(this.read) });
        if (this.owner) q.set('owner', this.owner);
        const log = await api('/v1/runs/' + encodeURIComponent(this.runID) + '/steps/' + encodeURIComponent(this.stepID) + '/log?' + q);
        if (!log.stored) { this.status.textContent = '(this stack keeps no logs)'; this.done = true; return; }
        for (const c of log.chunks) {
          if (c.offset + c.bytes <= this.read) continue;
          const r = await fetch(c.url, { cache: 'no-store' });
          if (!r.ok) throw new Error('log chunk: ' + r.status);
          let bytes = new Uint8Array(await r.arrayBuffer());
          if (c.offset < this.read) bytes = bytes.subarray(this.read - c.offset);
          this.pre.append(document.createTextNode(this.decoder.decode(bytes, { stream: true })));
          this.read = c.offset + c.bytes;
        }
        more = log.more;
        if (log.complete) {
          this.pre.append(document.createTextNode(this.decoder.decode()));
          this.done = true;
          this.status.textContent = '(' + log.bytes + ' bytes, complete)';
        } else {
          this.status.textContent = state === 'RUNNING' ? '(following)' : '';
        }
      }
    } catch (e) {
      this.status.textContent = '(' + (e.message || e) + ')';
    } finally {
      this.busy = false;
    }
  }
}

// ---- one node ----

function node(gen, nodeID) {
  const head = h('section', { id: 'node-head' });
  const actions = h('div', { class: 'actions', id: 'node-actions' });
  const holds = h('section', { id: 'node-holds' });
  const health = h('section', { id: 'node-health' });
  const leases = h('section', { id: 'node-leases' });
  append(view, h('h1', {}, 'Node ', h('span', { id: 'node-id' }, nodeID)), head, actions, holds, health, leases);
  const path = '/v1/nodes/' + encodeURIComponent(nodeID);
  let actionState = '';
  let reload = async () => {};
  const stop = every(gen, reload = async () => {
    const [data, held] = await Promise.all([api(path), api('/v1/runs?kind=hold&state=RUNNING&limit=100').catch(() => ({ runs: [] }))]);
    if (gen !== generation) return;
    clearError();
    const n = data.node;
    replace(head, h('dl', { class: 'facts' },
      fact('state', badge(n.state, 'state'), 'node-state'),
      fact('health', [badge(n.health, 'health'), n.health_reason ? ' ' + n.health_reason : ''], 'node-health-now'),
      fact('health since', when(n.health_since)),
      n.quarantined_by ? fact('quarantined by', n.quarantined_by) : null,
      fact('drain', drainText(n) || 'no', 'node-drain'),
      fact('labels', n.labels.map((l) => h('span', { class: 'label' }, l))),
      n.run_id ? fact('run', [runLink(n.run_id, n.run_owner), n.role ? ' as ' + n.role : '', n.leased_at ? [' since ', when(n.leased_at)] : '']) : null,
      fact('infra failures', n.infra_failures),
      fact('boot', n.boot_id),
      fact('last heartbeat', ago(n.last_seen_at))));
    const key = [n.draining, !!n.drain_requested_by, n.health].join('|');
    if (key !== actionState) {
      actionState = key;
      const call = (method, tail, body) => act(async () => { await api(path + tail, { method, body }); await reload(); });
      replace(actions,
        n.drain_requested_by ? h('button', { type: 'button', id: 'undrain', onclick: () => call('DELETE', '/drain') }, 'Undrain')
          : h('button', { type: 'button', id: 'drain', onclick: () => call('POST', '/drain') }, 'Drain'), ' ',
        n.health === 'quarantined' ? h('button', { type: 'button', id: 'lift', onclick: () => call('DELETE', '/quarantine') }, 'Lift quarantine')
          : h('button', { type: 'button', id: 'quarantine', onclick: () => call('POST', '/quarantine', { reason: 'from the console' }) }, 'Quarantine'));
    }
    const mine = held.runs.filter((r) => Object.values(r.assigned || {}).includes(nodeID) || Object.values(r.roles || {}).some((x) => x.node_id === nodeID));
    replace(holds, mine.length ? [h('h2', {}, 'Holds'), table(['hold', 'owner', 'ends'], mine.map((r) => h('tr', {}, h('td', {}, runLink(r.run_id, r.owner)), h('td', {}, r.owner || ''), h('td', {}, when(r.hold_ends_at)))))] : '');
    const rows = (kind) => data.history.filter((e) => e.kind === kind).map((e) => h('tr', {},
      h('td', {}, when(e.at)), h('td', {}, e.from || ''), h('td', {}, e.to), h('td', {}, e.reason || ''), h('td', {}, e.run_id ? runLink(e.run_id) : '')));
    replace(health, h('h2', {}, 'Health history'), table(['at', 'from', 'to', 'reason', 'run'], rows('health')));
    replace(leases, h('h2', {}, 'Lease history'), table(['at', 'from', 'to', 'reason', 'run'], rows('lease')));
    rendered('node');
  });
  return stop;
}

show();

// count is n things, "1 shape" or "3 shapes".
function count(n, thing) { return n + ' ' + thing + (n === 1 ? '' : 's'); }

// runsWaiting is how many runs wait, "1 run waits" or "3 runs wait".
function runsWaiting(n) { return count(n, 'run') + (n === 1 ? ' waits' : ' wait'); }
