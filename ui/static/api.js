// api.js: the REST API of the daemon that serves this page (same origin),
// the error every failed call throws, with the server's own message, and
// the API token that a daemon with --auth-token-file asks for.
//
// The token lives in sessionStorage, not localStorage: it is this tab's
// only, survives a reload and goes when the tab closes. Every request this
// module sends carries it as "Authorization: Bearer <token>"; a 401 to a
// request that carried the stored token forgets it and tells the shell
// (authHooks), which shows the sign-in form. With mutual TLS the browser
// presents its client certificate itself and no token is asked for.

// ApiError is a refusal or failure of the API: status is the HTTP status,
// code the gRPC code (3 InvalidArgument, 5 NotFound, 9 FailedPrecondition,
// ...) and message the server's words, which start with the field path for
// a validation error ("spec.limit.cpu: ...").
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  // field is the path a validation message names, or "".
  get field() {
    const m = /^([A-Za-z][\w.\[\]]*): /.exec(this.message);
    return m ? m[1] : "";
  }
}

const codeNames = {
  3: "invalid argument", 5: "not found", 6: "already exists", 7: "permission denied",
  9: "failed precondition", 10: "aborted", 14: "unavailable", 16: "unauthenticated", 13: "internal",
};
export function codeName(code) { return codeNames[code] || ""; }

// ------------------------------------------------------------------ token

const TOKEN_KEY = "peloton.token";

// token is the stored API token, or "". Storage a browser refuses (a
// sandboxed frame) counts as none.
export function token() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch { return ""; }
}

export function setToken(t) { sessionStorage.setItem(TOKEN_KEY, t); }

export function clearToken() {
  try { sessionStorage.removeItem(TOKEN_KEY); } catch { /* nothing stored */ }
}

// authHooks lets the shell hear that the server wants a (new) token:
// unauthenticated(err, hadToken) after a 401; hadToken says the stored
// token was refused (and is forgotten), not merely missing.
export const authHooks = { unauthenticated: () => {} };

// errorOf reads a refusal's {"code", "message"} body into an ApiError.
export async function errorOf(resp) {
  const text = await resp.text().catch(() => "");
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  const msg = (data && data.message) || text.trim() || resp.statusText || "HTTP " + resp.status;
  return new ApiError(resp.status, data && data.code, msg);
}

// send is fetch() with the stored token; every request of the UI goes
// through it. A 401 throws the server's refusal; if the request carried
// the token still stored (not one signed out of, or replaced, since it
// left), the token is forgotten and the shell told. A request the server
// never answered throws ApiError 14 (unavailable); an abort, AbortError.
export async function send(path, init = {}) {
  const used = token();
  const headers = new Headers(init.headers);
  if (used) headers.set("Authorization", "Bearer " + used);
  let resp;
  try {
    resp = await fetch(path, { ...init, headers });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, 14, "the server did not answer: " + e.message);
  }
  if (resp.status === 401) {
    const err = await errorOf(resp);
    if (used === token()) {
      clearToken();
      authHooks.unauthenticated(err, used !== "");
    }
    throw err;
  }
  return resp;
}

// checkToken asks the server whether it takes candidate, without storing
// it: at probe (a GET under /v1/ that any authenticated caller may make)
// a 401 throws the server's refusal, and any other answer means the token
// authenticated - what it may see and do is for each page to find out.
export async function checkToken(probe, candidate) {
  let resp;
  try {
    resp = await fetch(probe, { headers: { "Accept": "application/json", "Authorization": "Bearer " + candidate } });
  } catch (e) {
    throw new ApiError(0, 14, "the server did not answer: " + e.message);
  }
  if (resp.status === 401) throw await errorOf(resp);
  await resp.body?.cancel();
}

// ------------------------------------------------------------------- calls

// call sends one request and returns the decoded JSON answer.
export async function call(method, path, body, signal) {
  const init = { method, headers: { "Accept": "application/json" }, signal };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await send(path, init);
  if (!resp.ok) throw await errorOf(resp);
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  return data || {};
}

export const get = (path, signal) => call("GET", path, undefined, signal);
export const post = (path, body) => call("POST", path, body === undefined ? {} : body);
export const put = (path, body) => call("PUT", path, body);

// query builds "?a=1&b=2&b=3" from an object, leaving out empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "") continue;
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else q.append(k, v);
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

// listAll fetches every page of a paged list (ListJobs, ListTasks, ...),
// at most maxPages pages.
// onPage, if set, sees the items so far after each page, so a long list
// can be shown as it arrives; firstPageSize makes that first page small.
export async function listAll(path, params, key, signal, maxPages = 50, onPage, firstPageSize) {
  let out = [];
  let token = "";
  for (let i = 0; i < maxPages; i++) {
    const size = i === 0 && firstPageSize ? { pageSize: firstPageSize } : {};
    const r = await get(path + query({ ...params, ...size, pageToken: token }), signal);
    out = out.concat(r[key] || []);
    if (onPage) onPage(out);
    token = r.nextPageToken || "";
    if (!token) break;
  }
  return out;
}

// requestId is a fresh id for an idempotent create.
export function requestId() {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return "ui-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

export const enc = encodeURIComponent;

// EventStream reads a server-sent event stream (GET /v1/events) with
// fetch(), through send(), so that it carries the token: EventSource
// cannot send an Authorization header. It has the part of EventSource the
// shell uses - onopen, onerror, addEventListener(type, fn), close() - and,
// like the shell's use of EventSource, reconnects never by itself: on an
// error or the stream's end it calls onerror once and stops, and its owner
// opens a new one after its own backoff. status is the HTTP status of a
// refused stream (0 when the stream failed or ended). A 401 goes to
// authHooks as for every other request.
export class EventStream {
  constructor(url) {
    this.onopen = null;
    this.onerror = null;
    this.status = 0;
    this.listeners = new Map();
    this.abort = new AbortController();
    this.run(url);
  }

  addEventListener(type, fn) {
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(fn);
  }

  close() { this.abort.abort(); }

  async run(url) {
    const signal = this.abort.signal;
    try {
      const resp = await send(url, { headers: { "Accept": "text/event-stream" }, cache: "no-store", signal });
      if (!resp.ok) {
        this.status = resp.status;
        await resp.body?.cancel();
        throw new ApiError(resp.status, 0, "the event stream was refused");
      }
      if (this.onopen) this.onopen();
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      // The server ends lines with "\n" (a "\r" before it is dropped);
      // a blank line ends an event, ":" starts a comment (the heartbeat).
      let buf = "", type = "", data = [];
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).replace(/\r$/, "");
          buf = buf.slice(nl + 1);
          if (line === "") {
            if (data.length) this.dispatch(type || "message", data.join("\n"));
            type = "";
            data = [];
            continue;
          }
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") type = val;
          else if (field === "data") data.push(val);
        }
      }
    } catch {
      // Every failure, a refusal included, is an error of the stream.
    }
    if (!signal.aborted && this.onerror) this.onerror();
  }

  dispatch(type, data) {
    for (const fn of this.listeners.get(type) || []) fn({ type, data });
  }
}
