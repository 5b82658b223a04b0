// app.js: the shell. It routes /ui/... paths to pages (deep links work
// because the server answers every /ui/ path with this app), keeps the
// open page live by polling the API every couple of seconds while the tab
// is visible (the REST API has no watch to subscribe to), and shows what
// the API refused.
import { h, replace, errorBox, hooks } from "./dom.js";
import { clusterRoutes, clusterNav } from "./cluster.js";
import { federationRoutes, federationNav } from "./federation.js";

const kind = document.querySelector('meta[name="peloton-api"]').content;
const routes = kind === "federation" ? federationRoutes : clusterRoutes;
const nav = kind === "federation" ? federationNav : clusterNav;

// POLL_MS is how often a page re-reads what it shows.
const POLL_MS = 2000;

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
  const main = document.getElementById("main");
  const flash = h("div.flash", { "aria-live": "assertive" });
  const root = h("div.page");
  replace(main, flash, root);
  const abort = new AbortController();
  const page = { abort, refreshers: [], timer: 0, flash };
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
  const h1 = root.querySelector("h1");
  if (h1) document.title = h1.textContent + " · Peloton";
  document.body.dataset.ready = path; // tests wait for this
  if (!performance.getEntriesByName("peloton:ready").length) performance.mark("peloton:ready");
  schedule(page);
}

function schedule(page) {
  clearTimeout(page.timer);
  page.timer = setTimeout(() => tick(page), POLL_MS);
}

async function tick(page) {
  if (page !== current || page.abort.signal.aborted) return;
  if (!document.hidden) {
    for (const r of page.refreshers) {
      try { await r(); } catch { /* each refresher shows its own error */ }
    }
    const live = document.getElementById("live");
    replace(live, "live · " + new Date().toLocaleTimeString());
  }
  schedule(page);
}

hooks.go = (href) => go(href);
hooks.refresh = () => {
  if (current) {
    clearTimeout(current.timer);
    current.timer = setTimeout(() => tick(current), 50);
  }
};
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

open(location.pathname);
