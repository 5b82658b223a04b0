// app.js: the shell. It routes /ui/... paths to pages (deep links work
// because the server answers every /ui/ path with this app), keeps the
// open page live, and shows what the API refused.
//
// Live: the server's event stream (GET /v1/events, server-sent events)
// says when what the pages show may have changed, and the open page reads
// the API again then (debounced). While the stream is connected the page
// is read only every SAFETY_MS otherwise; while it is not (an older
// server, a proxy that drops it, the server's stream limit) the page polls
// every POLL_MS and the stream is tried again with a backoff. The header
// says which ("live" or "polling"). ?nopoll in the first URL turns polling
// off altogether (tests use it to prove the stream alone updates a page).
//
// Sign-in: a server started with --auth-token-file answers 401 to a call
// without a valid token; the page then gives way to a sign-in form, whose
// token api.js keeps in sessionStorage and sends with every request. While
// a token is stored the stream is read with fetch() (api.js EventStream),
// since EventSource cannot send the Authorization header; without one it
// is an EventSource, as before (a server without tokens, or mutual TLS,
// where the browser presents its certificate on every connection). A 403
// is not a sign-in matter: it shows where the page shows errors.
import { ApiError, EventStream, authHooks, checkToken, clearToken, setToken, token } from "./api.js";
import { h, replace, errorBox, hooks } from "./dom.js";
import { clusterRoutes, clusterNav } from "./cluster.js";
import { federationRoutes, federationNav } from "./federation.js";

const kind = document.querySelector('meta[name="peloton-api"]').content;
const routes = kind === "federation" ? federationRoutes : clusterRoutes;
const nav = kind === "federation" ? federationNav : clusterNav;

// POLL_MS is how often a page re-reads what it shows without the event
// stream; SAFETY_MS how often with it.
const POLL_MS = 2000;
const SAFETY_MS = 30000;
// An event refreshes the page after DEBOUNCE_MS, and no sooner than
// MIN_GAP_MS after the last refresh began.
const DEBOUNCE_MS = 100;
const MIN_GAP_MS = 1000;
// The stream is tried again after RETRY_MIN_MS, doubling up to RETRY_MAX_MS.
const RETRY_MIN_MS = 2000;
const RETRY_MAX_MS = 60000;
// Pages that show the hosts' usage, refreshed on usage events too.
const USAGE_PAGES = /^\/ui\/(|hosts(\/.*)?|partitions|jobs\/[^/]+\/tasks\/.*)$/;
const noPoll = new URLSearchParams(location.search).has("nopoll");
let mode = "polling"; // or "live": the event stream is connected
// signingIn: the sign-in form shows instead of a page (the server wants a
// token); nothing is read and no stream is open until it is filled in.
let signingIn = false;
// PROBE is a read that any authenticated caller may make: the sign-in form
// checks a token against it before keeping it.
const PROBE = kind === "federation" ? "/v1/federation/pools" : "/v1/pools";

let current = null; // the open page: {abort, refreshers, timer}

function renderNav(path) {
  const el = document.getElementById("nav");
  replace(el, nav.map(([href, label, key]) => {
    const active = href === "/ui/" ? path === "/ui/" : path.startsWith(href);
    return h("a", { href, "aria-current": active ? "page" : null, title: key ? `${label} (g then ${key})` : label }, label);
  }));
}

function match(path) {
  for (const [re, page] of routes) {
    const m = re.exec(path);
    if (m) return [page, m.slice(1).map(decodeURIComponent)];
  }
  return [null, []];
}

async function open(path) {
  if (current) {
    current.abort.abort();
    clearTimeout(current.timer);
  }
  renderNav(path);
  // A link followed from the sign-in form only moves the address: the page
  // opens once a token is given.
  if (signingIn) return;
  const main = document.getElementById("main");
  const flash = h("div.flash", { "aria-live": "assertive" });
  const root = h("div.page");
  replace(main, flash, root);
  const abort = new AbortController();
  const page = { abort, refreshers: [], timer: 0, flash, path, busy: true, again: false, last: Date.now() };
  current = page;
  const [fn, params] = match(path);
  const ctx = {
    root,
    params,
    query: new URLSearchParams(location.search),
    signal: abort.signal,
    kind,
    // live shows fn's nodes in slot now and at every poll. A failed read
    // shows the API's message in the slot instead.
    live: async (slot, fn) => {
      const run = async () => {
        try {
          const nodes = await fn();
          if (abort.signal.aborted) return;
          const key = document.activeElement && slot.contains(document.activeElement) ? document.activeElement.dataset.key : null;
          const scroll = Array.from(slot.querySelectorAll("[data-keep-scroll]"), (e) => [e.dataset.keepScroll, e.scrollTop]);
          replace(slot, nodes);
          for (const [k, top] of scroll) {
            const e = slot.querySelector(`[data-keep-scroll="${k}"]`);
            if (e) e.scrollTop = top;
          }
          if (key) {
            const again = slot.querySelector(`[data-key="${CSS.escape(key)}"]`);
            if (again) again.focus();
          }
        } catch (e) {
          if (e.name === "AbortError" || abort.signal.aborted) return;
          replace(slot, errorBox(e));
        }
      };
      page.refreshers.push(run);
      await run();
    },
    // every runs fn at every poll (for pages that update in place).
    every: (fn) => page.refreshers.push(fn),
    onLeave: (fn) => abort.signal.addEventListener("abort", fn),
  };
  if (!fn) {
    root.append(h("h1", "No such page"), h("p", "Nothing lives at ", h("code", path), ". Pick a page above."));
    document.title = "Not found · Peloton";
  } else {
    try {
      await fn(ctx, ...params);
    } catch (e) {
      if (e.name !== "AbortError") root.append(errorBox(e, "This page could not load"));
    }
  }
  // A page left while it loaded (for another, or for the sign-in form)
  // names nothing and schedules nothing.
  if (page !== current) return;
  const h1 = root.querySelector("h1");
  if (h1) document.title = h1.textContent + " · Peloton";
  document.body.dataset.ready = path; // tests wait for this
  if (!performance.getEntriesByName("peloton:ready").length) performance.mark("peloton:ready");
  // Events that came while the page loaded are read now.
  page.busy = false;
  if (page.again) {
    page.again = false;
    soon(DEBOUNCE_MS);
  } else {
    schedule(page);
  }
}

// schedule reads the page again after ms, or after the poll interval of
// the current mode.
function schedule(page, ms) {
  clearTimeout(page.timer);
  if (ms === undefined) {
    if (noPoll) return;
    ms = mode === "live" ? SAFETY_MS : POLL_MS;
  }
  page.timer = setTimeout(() => tick(page), ms);
}

// soon reads the open page again shortly (for an event, no sooner than
// MIN_GAP_MS after the last read began); a read already running is
// followed by one more.
function soon(delay, gap = true) {
  const page = current;
  if (!page || page.abort.signal.aborted) return;
  if (page.busy) { page.again = true; return; }
  schedule(page, gap ? Math.max(delay, page.last + MIN_GAP_MS - Date.now()) : delay);
}

async function tick(page) {
  if (page !== current || page.abort.signal.aborted) return;
  if (page.busy) { page.again = true; return; }
  if (!document.hidden) {
    page.busy = true;
    page.last = Date.now();
    try {
      for (const r of page.refreshers) {
        try { await r(); } catch { /* each refresher shows its own error */ }
      }
    } finally {
      page.busy = false;
    }
    showMode(new Date().toLocaleTimeString());
    const n = Number(document.body.dataset.refreshes || 0) + 1;
    document.body.dataset.refreshes = String(n); // tests read it
  }
  if (page.again) {
    page.again = false;
    soon(DEBOUNCE_MS);
  } else {
    schedule(page);
  }
}

// showMode says in the header whether the page is live or polls.
function showMode(time) {
  const el = document.getElementById("live");
  el.dataset.mode = mode;
  el.title = mode === "live" ? "The server tells this page when to update (server-sent events)"
    : noPoll ? "Not updating: polling is off (?nopoll) and the event stream is not connected"
      : `Updating every ${POLL_MS / 1000} s; the event stream is not connected`;
  if (time) el.dataset.time = time;
  replace(el, el.dataset.time ? `${mode} · ${el.dataset.time}` : mode);
}

// connect opens the event stream - with the stored token, if there is
// one - and on an error falls back to polling and tries again later, each
// time waiting longer.
let retryMs = RETRY_MIN_MS;
let failed = false; // the stream failed since it was last connected
let es = null, retryTimer = 0;
function connect() {
  clearTimeout(retryTimer);
  if (signingIn) return;
  let src;
  if (token()) src = new EventStream("/v1/events");
  else if (typeof EventSource === "function") src = new EventSource("/v1/events");
  else return;
  es = src;
  src.onopen = () => {
    retryMs = RETRY_MIN_MS;
    mode = "live";
    showMode();
    // Whatever changed while the stream was down is read now; the poll
    // gives way to the slow safety read.
    if (failed) soon(DEBOUNCE_MS);
    else if (current && !current.busy) schedule(current);
    failed = false;
  };
  src.addEventListener("change", () => soon(DEBOUNCE_MS));
  src.addEventListener("usage", () => { if (current && USAGE_PAGES.test(current.path)) soon(DEBOUNCE_MS); });
  src.onerror = () => {
    src.close();
    if (es !== src) return; // closed on pagehide, or replaced
    es = null;
    failed = true;
    const was = mode;
    mode = "polling";
    showMode();
    if (was === "live") soon(DEBOUNCE_MS); // and polls from then on
    // A 403: this principal may not watch the whole cluster (the stream
    // needs the viewer role cluster-wide); the page polls what it may see,
    // and the stream is asked for again only rarely, in case that changes.
    if (src.status === 403) retryMs = RETRY_MAX_MS;
    retryTimer = setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
  };
}

// disconnect closes the event stream and stops trying it.
function disconnect() {
  clearTimeout(retryTimer);
  retryMs = RETRY_MIN_MS;
  if (es) {
    const src = es;
    es = null;
    src.close();
  }
  mode = "polling";
  showMode();
}

// ---------------------------------------------------------------- sign-in

// showSignIn puts the sign-in form where the page was, and stops reading:
// the server answered 401. message (a node) says why - the server's
// refusal of the token that was stored, or that the user signed out; a
// first visit without a token has none. A form already showing keeps what
// it says unless there is a message to replace it.
function showSignIn(message) {
  if (current) {
    current.abort.abort();
    clearTimeout(current.timer);
    current = null;
  }
  disconnect();
  signingIn = true;
  showAuth();
  const main = document.getElementById("main");
  let form = main.querySelector("form.signin");
  if (!form) {
    form = signInForm();
    replace(main, form);
    document.title = "Sign in · Peloton";
    form.querySelector("input").focus();
  }
  if (message) replace(form.querySelector(".formerror"), message);
}

// signInForm asks for the API token and keeps it only if the server takes
// it; a token it refuses stays in the field with the server's words.
function signInForm() {
  const input = h("input#signin-token", {
    type: "password", name: "token", autocomplete: "off", spellcheck: "false", required: true, "aria-describedby": "signin-msg",
  });
  const button = h("button", { type: "submit", dataset: { action: "sign-in" } }, "Sign in");
  const msg = h("div.formerror#signin-msg");
  const form = h("form.card.signin", { novalidate: true, "aria-labelledby": "signin-title" },
    h("h1#signin-title", "Sign in"),
    h("p.muted", "This Peloton server wants to know who you are. Paste the API token its operator gave you; ",
      "this tab keeps it until you sign out or close the tab."),
    h("label.field", h("span", "API token"), input),
    msg,
    h("div.buttons", button));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const t = input.value.trim();
    // A header value cannot hold anything else; the server's tokens never do.
    const bad = !t ? "token: paste the API token" : !/^[\x21-\x7e]+$/.test(t) ? "token: a token is printable ASCII without spaces" : "";
    if (bad) {
      replace(msg, errorBox(new ApiError(400, 3, bad)));
      input.focus();
      return;
    }
    button.disabled = true;
    try {
      await checkToken(PROBE, t);
      setToken(t);
    } catch (e) {
      replace(msg, errorBox(e, "Not signed in"));
      input.select();
      return;
    } finally {
      button.disabled = false;
    }
    signingIn = false;
    showAuth();
    connect();
    await open(location.pathname);
    document.getElementById("main").focus({ preventScroll: true });
  });
  return form;
}

// signOut forgets the token; the server is not told (a bearer token is
// not a session it keeps).
function signOut() {
  clearToken();
  showSignIn(h("p.notice", { role: "status" }, "Signed out. Paste a token to sign in again."));
}

// showAuth shows "Sign out" while a token is stored, and the live
// indicator while a page (not the form) shows. body[data-auth] says which
// of "signin", "token" or "none" (no token: the server wants none, or
// takes the browser's certificate); tests read it.
function showAuth() {
  const stored = token() !== "";
  document.getElementById("signout").hidden = !stored || signingIn;
  document.getElementById("live").hidden = signingIn;
  document.body.dataset.auth = signingIn ? "signin" : stored ? "token" : "none";
}

authHooks.unauthenticated = (err, hadToken) => showSignIn(hadToken ? errorBox(err, "Signed out") : null);
document.getElementById("signout").addEventListener("click", signOut);

hooks.go = (href) => go(href);
hooks.refresh = () => soon(50, false);
hooks.flash = (err, what) => {
  if (!current) return;
  if (!err) { replace(current.flash); return; }
  replace(current.flash, h("div.flashrow", errorBox(err, what ? `${what} was refused` : ""),
    h("button.close", { type: "button", "aria-label": "Dismiss", onclick: () => replace(current.flash) }, "×")));
};

export function go(href) {
  history.pushState(null, "", href);
  open(location.pathname);
  window.scrollTo(0, 0);
  document.getElementById("main").focus({ preventScroll: true });
}

document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a[href]");
  if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith("/ui/") || a.target) return;
  ev.preventDefault();
  go(url.pathname + url.search);
});
window.addEventListener("popstate", () => open(location.pathname));

// Keyboard: "/" focuses the page's search box; "g" then a letter opens a page.
let gPressed = 0;
document.addEventListener("keydown", (ev) => {
  const t = ev.target;
  if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
  if (ev.metaKey || ev.ctrlKey || ev.altKey) return;
  if (ev.key === "/") {
    const s = document.querySelector("main input[type=search]");
    if (s) { ev.preventDefault(); s.focus(); }
    return;
  }
  if (ev.key === "g") { gPressed = Date.now(); return; }
  if (Date.now() - gPressed < 1500) {
    const hit = nav.find(([, , key]) => key === ev.key);
    gPressed = 0;
    if (hit) { ev.preventDefault(); go(hit[0]); }
  }
});
document.addEventListener("visibilitychange", () => { if (!document.hidden) hooks.refresh(); });

// A page left for another (kept in the back/forward cache) closes its
// stream: the browser's few connections per server are for the open page.
window.addEventListener("pagehide", () => {
  clearTimeout(retryTimer);
  if (es) { es.close(); es = null; }
});
window.addEventListener("pageshow", (ev) => { if (ev.persisted && !es) connect(); });

showAuth();
showMode();
connect();
open(location.pathname);
