// Signing in, and calling the API as the person signed in. The credential is a bearer token
// kept in sessionStorage — this tab's, gone with it — and sent as Authorization: Bearer; it is
// never put in an address. Which sign-in the stack takes comes from /console/config.json:
// "token" (a token pasted into the form: make dev's development tokens), "jwt" (OAuth 2.0
// authorization code with PKCE, S256, against the stack's issuer, with the people's public app
// client) or "iam" (SigV4, which a page cannot sign: the command line instead).

const TOKEN = 'mediator.token';
const PENDING = 'mediator.signin'; // the PKCE verifier, state and return address while away

let config = null;

export async function loadConfig() {
  if (config) return config;
  const r = await fetch('/console/config.json', { cache: 'no-store' });
  if (!r.ok) throw new Error('config.json answered ' + r.status);
  config = await r.json();
  return config;
}

export function token() { return sessionStorage.getItem(TOKEN); }
export function setToken(t) { sessionStorage.setItem(TOKEN, t); }
export function signOut() { sessionStorage.removeItem(TOKEN); }

export class APIError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || ('the API answered ' + status));
    this.status = status;
    this.problem = problem || {};
  }
}

// onUnauthenticated is called when the API refuses the token (401): the app shows the sign-in.
export let onUnauthenticated = () => {};
export function whenUnauthenticated(fn) { onUnauthenticated = fn; }

// calls counts the API calls made, by route, for the console's bench.
export const calls = { total: 0 };

// api calls the API as the person signed in and answers the JSON body; a problem is thrown as
// an APIError.
export async function api(path, { method = 'GET', body } = {}) {
  const headers = { Authorization: 'Bearer ' + (token() || '') };
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  calls.total++;
  const r = await fetch(path, init);
  let data = null;
  const text = await r.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (r.status === 401) {
    signOut();
    onUnauthenticated();
  }
  if (!r.ok) throw new APIError(r.status, data);
  return data;
}

function base64url(bytes) {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function random(n) {
  const b = new Uint8Array(n);
  crypto.getRandomValues(b);
  return base64url(b);
}

// challenge is RFC 7636's S256: BASE64URL(SHA-256(ASCII(verifier))).
export async function challenge(verifier) {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

export function redirectURI() { return location.origin + '/console/callback'; }

// startSignIn sends the browser to the issuer's sign-in, remembering the verifier and the
// address to come back to.
export async function startSignIn(returnTo) {
  const c = await loadConfig();
  const verifier = random(32); // 43 characters, RFC 7636's shortest
  const state = random(16);
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, returnTo }));
  const q = new URLSearchParams({
    response_type: 'code',
    client_id: c.client_id,
    redirect_uri: redirectURI(),
    scope: c.scopes,
    state,
    code_challenge: await challenge(verifier),
    code_challenge_method: 'S256',
  });
  location.assign(c.authorize_url + (c.authorize_url.includes('?') ? '&' : '?') + q);
}

// finishSignIn trades the callback's code for an access token, and answers the address to go
// back to. The state must be the one this tab sent: a code from elsewhere is refused.
export async function finishSignIn(params) {
  const c = await loadConfig();
  const pending = JSON.parse(sessionStorage.getItem(PENDING) || 'null');
  sessionStorage.removeItem(PENDING);
  if (params.get('error')) throw new Error('the issuer refused the sign-in: ' + params.get('error') + ' ' + (params.get('error_description') || ''));
  if (!pending || !params.get('state') || params.get('state') !== pending.state) throw new Error('this sign-in was not started here (its state does not match): sign in again');
  const r = await fetch(c.token_url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code: params.get('code') || '',
      redirect_uri: redirectURI(),
      client_id: c.client_id,
      code_verifier: pending.verifier,
    }),
  });
  const data = await r.json().catch(() => ({}));
  if (!r.ok || !data.access_token) throw new Error('the token endpoint answered ' + r.status + ' ' + (data.error || ''));
  setToken(data.access_token);
  return pending.returnTo || '/console/';
}
