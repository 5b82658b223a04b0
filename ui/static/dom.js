// dom.js: building DOM without innerHTML (names come from users), and the
// small pieces every page shares: tables, bars, state badges, errors and
// buttons that call the API and show its answer.
import { ApiError, codeName } from "./api.js";

// h("tag.class#id", {attr: v, onclick: f}, ...children) builds an element.
export function h(sel, attrs, ...children) {
  const m = /^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i.exec(sel);
  const el = document.createElement((m && m[1]) || "div");
  if (m && m[2]) {
    for (const part of m[2].match(/[.#][\w-]+/g)) {
      if (part[0] === ".") el.classList.add(part.slice(1));
      else el.id = part.slice(1);
    }
  }
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

// replace swaps el's children for the given ones.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const link = (href, text, attrs) => h("a", { href, ...attrs }, text);

// errorBox shows what the API said, with its code, never a blank page.
export function errorBox(err, what) {
  const code = err instanceof ApiError ? codeName(err.code) : "";
  const msg = err && err.message ? err.message : String(err);
  return h("div.error", { role: "alert" },
    what ? h("strong", what + ": ") : null,
    code ? h("span.code", code + " — ") : null, msg);
}

// table builds a table from column specs {title, cell(row) → node|text, cls}.
export function table(cols, rows, opts = {}) {
  return h("div.tablewrap",
    h("table" + (opts.cls ? "." + opts.cls : ""),
      h("thead", h("tr", cols.map((c) => h("th", { class: c.cls, scope: "col" }, c.title)))),
      h("tbody", rows.length ? rows.map((r) => h("tr", opts.rowAttrs ? opts.rowAttrs(r) : null,
        cols.map((c) => h("td", { class: c.cls }, c.cell(r)))))
        : h("tr", h("td.muted", { colspan: cols.length }, opts.empty || "none")))));
}

// badge shows a state name without its enum prefix, coloured by kind.
export function badge(state) {
  const s = String(state || "UNKNOWN");
  const short = s.replace(/^(JOB_|UPDATE_|HOST_|CLUSTER_|ROLLOUT_|STEP_|DISPATCH_|PARTITION_)/, "");
  return h("span.badge.s-" + stateClass(s), short);
}

// stateClass sorts every state of every lifecycle into a few colours.
export function stateClass(s) {
  s = String(s || "");
  if (/RUNNING|SUCCEEDED|_UP$|READY$|SETTLED|STEP_DONE|^DONE$|DISPATCHED$|HEALTHY/.test(s) && !/UNHEALTHY/.test(s)) return "ok";
  if (/FAILED|LOST|UNREACHABLE|UNHEALTHY|DOWN/.test(s)) return "bad";
  if (/KILL|ABORT|PREEMPT|ROLLED_BACK|ROLLING_BACK|CORDON|DRAIN|MOVING|DEGRADED|PAUSED/.test(s)) return "warn";
  if (/PENDING|INITIALIZED|OBSERVED|PLACING|PLACED|LAUNCH|STARTING|ROLLING|UPDATING/.test(s)) return "wait";
  return "none";
}

// zoneBadge shows a host's zone (HOST_ZONE_GREEN, or a Partition.zones key
// such as "green") in its colour; no zone is "unknown": no advisor, or its
// advice lapsed, or the host's agent went quiet.
export function zoneBadge(zone) {
  const z = String(zone || "unknown").replace(/^HOST_ZONE_/, "").toLowerCase();
  return h("span.badge.zone.z-" + (["green", "orange", "red"].includes(z) ? z : "unknown"), {
    title: z === "unknown" ? "zone unknown: no live advice for this host" : `zone ${z}, as the host advisor last said`,
  }, z);
}

// kinds are the resource kinds of the API's Resources message.
export const kinds = [
  { key: "cpu", label: "CPU", unit: "cores" },
  { key: "memoryMb", label: "Memory", unit: "MiB" },
  { key: "diskMb", label: "Disk", unit: "MiB" },
  { key: "gpu", label: "GPU", unit: "" },
];

export function num(v, digits = 1) {
  const n = Number(v || 0);
  if (!isFinite(n)) return String(v);
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(digits);
}

export function amount(kind, v) {
  const n = Number(v || 0);
  if (kind === "memoryMb" || kind === "diskMb") {
    if (n >= 1024 * 1024) return (n / 1024 / 1024).toFixed(1) + " TiB";
    if (n >= 1024) return (n / 1024).toFixed(1) + " GiB";
    return num(n) + " MiB";
  }
  return num(n, 2);
}

// bar is one meter: used of total, with optional ticks {at, label}.
export function bar(used, total, opts = {}) {
  const pct = total > 0 ? Math.min(100, (100 * used) / total) : 0;
  // A bar of capacity turns warm, then hot, as it fills; a bar of
  // progress (opts.progress) is good when full.
  const cls = opts.progress ? "progress" : pct >= 90 ? "hot" : pct >= 70 ? "warm" : "";
  const el = h("div.bar" + (cls ? "." + cls : ""), {
    role: "meter", "aria-valuemin": 0, "aria-valuemax": total, "aria-valuenow": used,
    title: opts.title || `${num(used)} of ${num(total)}`,
  }, h("div.fill", { style: { width: pct + "%" } }));
  if (opts.extra) {
    for (const x of opts.extra) {
      if (!(total > 0) || !(x.value > 0)) continue;
      const p = Math.min(100, (100 * x.value) / total);
      if (x.tick) el.append(h("div.tick." + x.cls, { style: { left: p + "%" }, title: x.title }));
      else el.append(h("div.span." + x.cls, { style: { width: p + "%" }, title: x.title }));
    }
  }
  return el;
}

// ago renders an RFC 3339 time as "12s ago" (title: the time itself).
export function ago(t) {
  if (!t || t.startsWith("0001-") || t.startsWith("1970-01-01T00:00:00")) return h("span.muted", "—");
  const d = (Date.now() - Date.parse(t)) / 1000;
  let s;
  if (!isFinite(d)) s = t;
  else if (d < 0) s = "just now";
  else if (d < 90) s = Math.round(d) + "s ago";
  else if (d < 5400) s = Math.round(d / 60) + "m ago";
  else if (d < 172800) s = Math.round(d / 3600) + "h ago";
  else s = Math.round(d / 86400) + "d ago";
  return h("time", { datetime: t, title: t }, s);
}

// actionButton calls act() on click, shows "…" while it runs, then the
// API's refusal next to itself or calls done(). With confirm, the first
// click asks to click again.
export function actionButton(label, act, opts = {}) {
  const msg = h("span.actionmsg", { role: "status" });
  let armed = false;
  const btn = h("button" + (opts.danger ? ".danger" : ""), {
    type: "button", disabled: opts.disabled, title: opts.title,
    dataset: opts.id ? { action: opts.id, key: opts.id } : undefined,
  }, label);
  btn.addEventListener("click", async () => {
    if (opts.confirm && !armed) {
      armed = true;
      btn.textContent = "Confirm " + label.toLowerCase();
      btn.classList.add("armed");
      setTimeout(() => { armed = false; btn.textContent = label; btn.classList.remove("armed"); }, 4000);
      return;
    }
    armed = false;
    btn.disabled = true;
    btn.textContent = label;
    btn.classList.remove("armed");
    replace(msg);
    try {
      await act();
      replace(msg, h("span.ok", "done"));
      hooks.flash(null);
      if (opts.done) opts.done();
      hooks.refresh();
    } catch (e) {
      replace(msg, errorBox(e));
      hooks.flash(e, label);
    } finally {
      btn.disabled = !!opts.disabled;
    }
  });
  return h("span.action", btn, msg);
}

// showFieldError puts a validation message next to the input whose
// data-field matches the field it names (or a prefix of it), else in
// the form's general error slot.
export function showFieldError(form, err) {
  for (const el of form.querySelectorAll(".fielderror")) el.remove();
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  const general = form.querySelector(".formerror");
  replace(general);
  if (!err) return;
  let field = err.field || "";
  let input = null;
  while (field && !(input = form.querySelector(`[data-field="${CSS.escape(field)}"]`))) {
    field = field.includes(".") ? field.slice(0, field.lastIndexOf(".")) : "";
  }
  if (!input && err.field) {
    // "spec.share" names a group: the first input of it.
    input = form.querySelector(`[data-field^="${CSS.escape(err.field)}."]`);
  }
  if (input) {
    input.setAttribute("aria-invalid", "true");
    const note = h("div.fielderror", { role: "alert", id: "err-" + (input.id || "f") }, err.message);
    input.setAttribute("aria-describedby", note.id);
    input.closest("label, .field").after(note);
    input.focus();
  } else {
    replace(general, errorBox(err));
  }
}

export function kv(pairs) {
  return h("dl.kv", pairs.filter(Boolean).map(([k, v]) => [h("dt", k), h("dd", v === "" || v === undefined ? h("span.muted", "—") : v)]));
}

export function section(title, ...body) {
  return h("section.card", h("h2", title), ...body);
}

// hooks lets the shell (app.js) hear about actions: refresh after one
// succeeds, flash its refusal where a refresh will not wipe it.
export const hooks = { refresh: () => {}, flash: () => {} };
