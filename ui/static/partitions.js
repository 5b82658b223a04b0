// partitions.js: the partitions page (/ui/partitions) over PartitionService:
// each partition's hosts, zones, pressure, oversubscription and use as the
// host advisor last said them, the advisor's status, the move history the
// stack keeps in etcd, and the partitions' sizes over that history.
import { get, query, enc } from "./api.js";
import { h, link, table, badge, num, amount, bar, ago, section, zoneBadge, hooks } from "./dom.js";

// HISTORY is how many moves the page reads for the sizes over time: the
// most the stack keeps, so the chart spans all the history there is.
const HISTORY = 1000;

const res = (r, k) => Number((r || {})[k] || 0);

// ZONES are the keys of Partition.zones, hottest last.
const ZONES = ["green", "orange", "red", "unknown"];

export async function partitionsPage(ctx) {
  const host = h("input", {
    type: "search", name: "host", placeholder: "Filter moves by host (/)", value: ctx.query.get("host") || "",
    "aria-label": "Filter moves by host",
  });
  const filters = h("form.filters", { role: "search" }, host);
  const body = h("div");
  const movesSlot = h("div");
  ctx.root.append(h("h1", "Partitions"),
    h("p.crumbs", link("/ui/hosts", "Hosts"), " · the CLI: ", h("code", "peloton partition list"), ", ", h("code", "peloton partition moves")),
    body, section("Moves", h("p.muted", "Newest first, as the stack keeps them (the newest 1,000). DONE moved the host; MOVING is under way; SUPERSEDED was overtaken by another move of the host; OBSERVED is what an advisor in observe mode would have done."),
      filters, movesSlot));
  const refresh = () => {
    const v = host.value.trim();
    history.replaceState(null, "", "/ui/partitions" + query({ host: v }));
    hooks.refresh();
  };
  let timer = 0;
  filters.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(refresh, 250); });
  filters.addEventListener("submit", (ev) => { ev.preventDefault(); refresh(); });

  let all = [];
  await ctx.live(body, async () => {
    const [parts, moves] = await Promise.all([
      get("/v1/partitions", ctx.signal), get("/v1/partitions/moves" + query({ limit: HISTORY }), ctx.signal),
    ]);
    all = moves.moves || [];
    const ps = parts.partitions || [];
    return [
      advisorCard(parts.advisor),
      section("Partitions now", partitionTable(ps)),
      section("Sizes over time", sizesChart(ps, all, Date.now())),
    ];
  });
  await ctx.live(movesSlot, async () => {
    const only = host.value.trim();
    // The whole history is at hand for the chart; a host's own moves come
    // from the API, which says so when it knows no such host.
    const moves = only ? (await get("/v1/partitions/moves" + query({ host: only, limit: HISTORY }), ctx.signal)).moves || [] : all;
    return [h("p.muted", `${moves.length} move${moves.length === 1 ? "" : "s"}` + (only ? ` of ${only}` : "")), moveTable(moves)];
  });
}

// advisorCard says who advises the stack, in which mode and how fresh its
// word is; without one, zones, pressure and oversubscription are unknown.
function advisorCard(st) {
  if (!st || !st.mode) {
    return section("Advisor", h("p.advisor.none", { dataset: { mode: "" } }, h("strong", "No advisor"),
      ": zones, pressure and oversubscription are unknown. Run one with ", h("code", "--advisor-mode"), " (",
      h("code", "peloton up"), ", ", h("code", "serve cluster"), ") or ", h("code", "peloton serve advisor"), "."));
  }
  return section("Advisor", h("p.advisor", { dataset: { mode: st.mode } },
    h("span.badge.s-" + (st.mode === "act" ? "ok" : "wait"), st.mode), " ",
    st.mode === "act" ? "moves hosts between partitions" : "only says what it would do (its decisions are the OBSERVED moves)",
    " · advisor ", h("code", st.advisorId || "?"), " · last advice ", ago(st.published),
    h("span.muted", " (it lapses unless renewed within 3 rounds)")));
}

function partitionTable(ps) {
  const meter = (p, k, used) => h("div.meter",
    bar(res(p.allocated, k), res(p.capacity, k), {
      title: `${amount(k, res(p.allocated, k))} allocated, ${amount(k, used)} used, of ${amount(k, res(p.capacity, k))}`,
      extra: [{ value: used, tick: true, cls: "used", title: `used ${amount(k, used)}` }],
    }),
    h("span.muted", `${amount(k, res(p.allocated, k))} alloc · ${amount(k, used)} used / ${amount(k, res(p.capacity, k))}`));
  return table([
    { title: "Partition", cell: (p) => h("strong", p.name || h("span.muted", "(none)")) },
    { title: "Hosts", cls: "num", cell: (p) => [String(p.hosts || 0),
      p.movingIn ? h("span.muted", ` +${p.movingIn} in`) : "", p.movingOut ? h("span.muted", ` −${p.movingOut} out`) : ""] },
    { title: "Zones", cell: (p) => h("span.chips", ZONES.filter((z) => (p.zones || {})[z] > 0).map((z) =>
      h("span.chip.small", zoneBadge(z), " ", String(p.zones[z])))) },
    { title: "Pressure", cell: (p) => h("div.meter", bar(Number(p.pressure || 0), 1, { title: `pressure ${num(p.pressure, 2)}` }), h("span.muted", Number(p.pressure || 0).toFixed(2))) },
    { title: "Oversub", cls: "num", cell: (p) => "×" + Number(p.oversubscriptionFactor || 1).toFixed(2) },
    { title: "Services over SLO", cls: "num", cell: (p) => h(p.servicesOverSlo > 0 ? "span.bad" : "span", `${p.servicesOverSlo || 0} of ${p.services || 0}`) },
    { title: "CPU", cell: (p) => meter(p, "cpu", Number(p.cpuUsed || 0)) },
    { title: "Memory", cell: (p) => meter(p, "memoryMb", Number(p.memoryUsedMb || 0)) },
    { title: "Slack", cell: (p) => `cpu ${num(res(p.slack, "cpu"), 2)} · ${amount("memoryMb", res(p.slack, "memoryMb"))}` },
    { title: "Revocable", cell: (p) => `cpu ${num(res(p.revocable, "cpu"), 2)} · ${amount("memoryMb", res(p.revocable, "memoryMb"))}` },
  ], ps, { empty: "No partitions: the cluster has no hosts.", rowAttrs: (p) => ({ dataset: { partition: p.name } }) });
}

// moveTable lists moves as the API gives them (newest first).
export function moveTable(moves) {
  return table([
    { title: "Time", cell: (m) => ago(m.time) },
    { title: "Host", cell: (m) => h("strong", link("/ui/hosts/" + enc(m.host), m.host)) },
    { title: "From → to", cell: (m) => `${m.from || "(none)"} → ${m.to}` },
    { title: "State", cell: (m) => badge(m.state) },
    { title: "Reason", cell: (m) => m.reason ? h("span.reason", m.reason) : h("span.muted", "none given") },
  ], moves, { empty: "No moves.", cls: "moves", rowAttrs: (m) => ({ dataset: { move: m.host, state: m.state } }) });
}

// sizesOverTime derives the partitions' host counts over the move history:
// from the counts now it walks back through the moves (newest first), and
// each DONE move took one host from `from` and gave it to `to`. MOVING,
// SUPERSEDED and OBSERVED moves changed no count. It returns steps, oldest
// first: from step.t on (ms since the epoch) the partitions had
// step.sizes, until the next step; the first step starts at the oldest move
// kept and the last is now. A move is dated when it started: the chart
// shows the host leaving then, not when it finished draining. Hosts added
// or removed are not in the history, so counts before such a change are
// what the moves imply, never below 0.
export function sizesOverTime(now, moves, nowMs) {
  const ordered = moves.map((m) => ({ m, t: Date.parse(m.time) })).filter((x) => isFinite(x.t)).sort((a, b) => b.t - a.t);
  let sizes = { ...now };
  const steps = [{ t: nowMs, sizes: { ...sizes }, move: null }];
  for (const { m, t } of ordered) {
    if (m.state !== "DONE" || !m.to) continue;
    steps.push({ t, sizes: { ...sizes }, move: m });
    sizes = { ...sizes };
    sizes[m.to] = Math.max(0, (sizes[m.to] || 0) - 1);
    if (m.from) sizes[m.from] = (sizes[m.from] || 0) + 1;
  }
  const oldest = ordered.length ? ordered[ordered.length - 1].t : nowMs;
  steps.push({ t: Math.min(oldest, steps[steps.length - 1].t), sizes, move: null });
  return steps.reverse();
}

// PALETTE colours the chart's partitions; it reads on light and dark.
const PALETTE = ["#2f7fe0", "#e0851d", "#2aa160", "#b04fc0", "#d5443e", "#3aa7b8", "#8a8f2a"];
const SVG = "http://www.w3.org/2000/svg";
const s = (tag, attrs, ...kids) => {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const c of kids) el.append(c);
  return el;
};

function clock(ms, span) {
  const d = new Date(ms);
  return span > 36 * 3600e3 ? d.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" })
    : d.toLocaleTimeString();
}

// sizesChart draws sizesOverTime as a step chart, one line per partition,
// with a dot at each DONE move (its title names the host and the reason).
function sizesChart(ps, moves, nowMs) {
  const now = Object.fromEntries(ps.map((p) => [p.name, Number(p.hosts || 0)]));
  const steps = sizesOverTime(now, moves, nowMs);
  const names = Array.from(new Set([...ps.map((p) => p.name), ...steps.flatMap((x) => Object.keys(x.sizes))])).sort();
  const done = steps.filter((x) => x.move).length;
  if (!names.length) return h("p.muted", "No partitions.");
  const W = 720, H = 170, L = 34, R = 10, T = 10, B = 24;
  const t0 = steps[0].t;
  // Some room before the oldest move, so the size it started from shows.
  const span0 = Math.max(nowMs - t0, 1000);
  const start = t0 - Math.max(span0 * 0.08, 2000);
  const span = nowMs - start;
  const max = Math.max(1, ...steps.flatMap((x) => names.map((n) => x.sizes[n] || 0)));
  const x = (t) => L + ((t - start) / span) * (W - L - R);
  const y = (v) => T + (1 - v / max) * (H - T - B);
  const svg = s("svg", {
    viewBox: `0 0 ${W} ${H}`, class: "steps", role: "img", "data-moves": String(done),
    "aria-label": `Hosts per partition from ${clock(start, span)} to now: ` +
      names.map((n) => `${n} ${steps[0].sizes[n] || 0} then ${now[n] || 0}`).join("; ") + `; ${done} move${done === 1 ? "" : "s"} done`,
  });
  // Axes: a grid line per host count (at most 6), times at both ends.
  const every = Math.max(1, Math.ceil(max / 5));
  for (let v = 0; v <= max; v += every) {
    svg.append(s("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "gridline" }),
      s("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "axis" }, String(v)));
  }
  svg.append(s("text", { x: L, y: H - 6, class: "axis" }, clock(start, span)),
    s("text", { x: W - R, y: H - 6, "text-anchor": "end", class: "axis" }, "now"));
  names.forEach((n, i) => {
    const colour = PALETTE[i % PALETTE.length];
    // Lines that coincide are nudged apart by a pixel or two.
    const dy = (i - (names.length - 1) / 2) * 1.5;
    let d = `M ${x(start).toFixed(1)} ${(y(steps[0].sizes[n] || 0) + dy).toFixed(1)}`;
    for (let k = 1; k < steps.length; k++) {
      d += ` H ${x(steps[k].t).toFixed(1)} V ${(y(steps[k].sizes[n] || 0) + dy).toFixed(1)}`;
    }
    svg.append(s("path", { d, class: "line", stroke: colour, "data-partition": n }, s("title", `${n}: ${now[n] || 0} hosts now`)));
  });
  for (const st of steps) {
    if (!st.move) continue;
    const m = st.move, i = names.indexOf(m.to);
    svg.append(s("circle", { cx: x(st.t), cy: y(st.sizes[m.to] || 0) + (i - (names.length - 1) / 2) * 1.5, r: 3.5, fill: PALETTE[i % PALETTE.length], class: "movedot" },
      s("title", `${new Date(st.t).toLocaleString()}: ${m.host} ${m.from || "(none)"} → ${m.to}${m.reason ? " — " + m.reason : ""}`)));
  }
  const legendItems = names.map((n, i) => h("span.legenditem", { dataset: { partition: n } },
    h("span.swatch", { style: { background: PALETTE[i % PALETTE.length] } }), `${n} `, h("span.muted", `${steps[0].sizes[n] || 0} → ${now[n] || 0}`)));
  return [
    h("div.chartwrap", svg),
    h("div.legend", legendItems),
    h("p.muted", `Derived from the move history: every DONE move (${done} kept) shifted one host, dated when it started. `,
      moves.length >= HISTORY ? `Only the newest ${HISTORY} moves are kept, so the chart begins at the oldest of them.` : "It spans the whole history the stack keeps."),
  ];
}
