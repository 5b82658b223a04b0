// federation.js: the pages of the federation's UI, over its REST API
// (/v1/federation/...): clusters, global pools split over clusters,
// federated services rolled out cluster by cluster, federated batch jobs.
// Each cluster's own pages are on that cluster's HTTP endpoint, linked
// from here.
import { get, post, put, call, query, enc, listAll } from "./api.js";
import { h, replace, link, table, badge, kinds, num, amount, bar, ago, actionButton, kv, section, errorBox } from "./dom.js";

export const federationNav = [
  ["/ui/", "Overview", "o"],
  ["/ui/clusters", "Clusters", "c"],
  ["/ui/pools", "Global pools", "p"],
  ["/ui/services", "Services", "s"],
  ["/ui/updates", "Rollouts", "u"],
  ["/ui/jobs", "Jobs", "j"],
  ["/ui/hosts", "Hosts", "h"],
];

export const federationRoutes = [
  [/^\/ui\/?$/, overviewPage],
  [/^\/ui\/clusters\/?$/, clustersPage],
  [/^\/ui\/clusters\/([^/]+)\/?$/, clusterPage],
  [/^\/ui\/pools\/?$/, poolsPage],
  [/^\/ui\/pools\/(.+)$/, poolsPage],
  [/^\/ui\/services\/?$/, servicesPage],
  [/^\/ui\/services\/([^/]+)\/?$/, servicePage],
  [/^\/ui\/updates\/?$/, rolloutsPage],
  [/^\/ui\/jobs\/?$/, jobsPage],
  [/^\/ui\/jobs\/([^/]+)\/?$/, jobPage],
  [/^\/ui\/hosts\/?$/, hostsPage],
];

const res = (r, k) => Number((r || {})[k] || 0);
const ROLLING = ["ROLLOUT_ROLLING", "ROLLOUT_PAUSED", "ROLLOUT_ROLLING_BACK"];

// clusterUI links to a page of a cluster's own UI, on its HTTP endpoint.
function clusterUI(c, path, text) {
  if (!c || !c.httpEndpoint) return text;
  const base = /^https?:\/\//.test(c.httpEndpoint) ? c.httpEndpoint : "http://" + c.httpEndpoint;
  return h("a", { href: base.replace(/\/$/, "") + path, rel: "noopener" }, text);
}

function capacityBars(cap, alloc) {
  return h("div.meters", kinds.map((k) => {
    const c = res(cap, k.key), a = res(alloc, k.key);
    if (!c && !a) return null;
    return h("div.meter", h("div.meterlabel", h("span", k.label), h("span.muted", `${amount(k.key, a)} of ${amount(k.key, c)}`)), bar(a, c));
  }));
}

async function clusterMap(signal) {
  const cs = (await get("/v1/federation/clusters", signal)).clusters || [];
  return [cs, Object.fromEntries(cs.map((c) => [c.name, c]))];
}

// ---------------------------------------------------------------- overview

async function overviewPage(ctx) {
  const body = h("div.cols");
  ctx.root.append(h("h1", "Federation overview"), body);
  await ctx.live(body, async () => {
    const [[cs, byName], svcs, jobs] = await Promise.all([
      clusterMap(ctx.signal), get("/v1/federation/services", ctx.signal), get("/v1/federation/jobs" + query({ pageSize: 200 }), ctx.signal),
    ]);
    const cap = {}, alloc = {};
    for (const c of cs) for (const k of kinds) { cap[k.key] = (cap[k.key] || 0) + res(c.capacity, k.key); alloc[k.key] = (alloc[k.key] || 0) + res(c.allocation, k.key); }
    const rolling = (svcs.services || []).filter((s) => s.rollout && ROLLING.includes(s.rollout.state));
    const pending = (jobs.jobs || []).filter((j) => j.dispatchState === "DISPATCH_PENDING");
    const bad = cs.filter((c) => c.state !== "CLUSTER_READY");
    return [
      section("Clusters", h("p.big", String(cs.length), h("span.muted", " clusters")),
        h("ul.plain", cs.map((c) => h("li", link("/ui/clusters/" + enc(c.name), c.name), " ", badge(c.state), " ", clusterUI(c, "/ui/", "open its UI"))))),
      section("Capacity and allocation", capacityBars(cap, alloc)),
      section("Rollouts in progress", rolling.length ? h("div", rolling.map((s) => serviceRollout(s, byName, true))) : h("p.muted", "none")),
      section("Alerts", bad.length || pending.length ? h("ul.alerts",
        bad.map((c) => h("li.warn", `Cluster ${c.name} is `, badge(c.state), c.message ? ": " + c.message : "")),
        pending.map((j) => h("li", link("/ui/jobs/" + enc(j.id), (j.spec.job || {}).name || j.id), " waits for a cluster", j.message ? ": " + j.message : "")))
        : h("p.muted", "Nothing needs attention.")),
    ];
  });
}

// ---------------------------------------------------------------- clusters

async function clustersPage(ctx) {
  const list = h("div");
  ctx.root.append(h("h1", "Clusters"), list);
  await ctx.live(list, async () => {
    const [cs] = await clusterMap(ctx.signal);
    return table([
      { title: "Name", cell: (c) => link("/ui/clusters/" + enc(c.name), c.name) },
      { title: "State", cell: (c) => badge(c.state) },
      { title: "Health", cell: (c) => badge(c.health) },
      { title: "Labels", cell: (c) => h("span.chips", Object.entries(c.labels || {}).map(([k, v]) => h("span.chip.small", `${k}=${v}`))) },
      { title: "CPU", cell: (c) => h("div.meter", bar(res(c.allocation, "cpu"), res(c.capacity, "cpu")), h("span.muted", `${num(res(c.allocation, "cpu"), 2)} / ${num(res(c.capacity, "cpu"), 2)}`)) },
      { title: "Memory", cell: (c) => h("div.meter", bar(res(c.allocation, "memoryMb"), res(c.capacity, "memoryMb")), h("span.muted", `${amount("memoryMb", res(c.allocation, "memoryMb"))} / ${amount("memoryMb", res(c.capacity, "memoryMb"))}`)) },
      { title: "Latency", cls: "num", cell: (c) => `${num(c.latencyMs, 1)} ms` },
      { title: "Last seen", cell: (c) => ago(c.lastSeenTime) },
      { title: "UI", cell: (c) => clusterUI(c, "/ui/", c.httpEndpoint || "") },
      { title: "", cell: (c) => c.state === "CLUSTER_CORDONED"
        ? actionButton("Uncordon", () => post(`/v1/federation/clusters/${enc(c.name)}:uncordon`), { id: "uncordon-" + c.name })
        : actionButton("Cordon", () => post(`/v1/federation/clusters/${enc(c.name)}:cordon`), { id: "cordon-" + c.name, confirm: true }) },
    ], cs, { empty: "No clusters are registered.", rowAttrs: (c) => ({ dataset: { cluster: c.name } }) });
  });
}

async function clusterPage(ctx, name) {
  const body = h("div");
  ctx.root.append(h("p.crumbs", link("/ui/clusters", "Clusters"), " / ", name), h("h1", "Cluster " + name), body);
  await ctx.live(body, async () => {
    const c = (await get("/v1/federation/clusters/" + enc(name), ctx.signal)).cluster;
    return [
      kv([["State", badge(c.state)], ["Health", badge(c.health)], ["Message", c.message || ""], ["Endpoint", c.endpoint],
        ["HTTP", clusterUI(c, "/ui/", c.httpEndpoint || "")], ["Labels", Object.entries(c.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ")],
        ["Registered", ago(c.registeredTime)], ["Last seen", ago(c.lastSeenTime)], ["Latency", `${num(c.latencyMs, 1)} ms`]]),
      section("Capacity and allocation", capacityBars(c.capacity, c.allocation)),
      h("p", clusterUI(c, "/ui/jobs", "Its jobs"), " · ", clusterUI(c, "/ui/hosts", "its hosts"), " · ", clusterUI(c, "/ui/pools", "its pools")),
    ];
  });
}

// ------------------------------------------------------------------- pools

async function poolsPage(ctx, selected) {
  const list = h("div");
  ctx.root.append(h("h1", "Global pools"), h("p.muted", "Each global pool is split over clusters by its placement weights, or by their capacity without weights; each row is one cluster's part: what the federation wants there, what the cluster has, and whether they agree."), list);
  await ctx.live(list, async () => {
    const pools = (await get("/v1/federation/pools", ctx.signal)).pools || [];
    const want = selected ? "/" + selected.replace(/^\//, "") : "";
    const shown = want ? pools.filter((p) => p.path === want) : pools;
    if (want && !shown.length) return errorBox(new Error(`global pool ${want} does not exist`));
    return shown.map((p) => section(p.path, kv([
      ["Reservation", fmtRes(p.spec.reservation)], ["Limit", fmtRes(p.spec.limit)],
      ["Split", Object.entries(((p.spec || {}).placement || {}).weights || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "by capacity"],
      ["Total allocation", fmtRes((p.total || {}).allocation)], p.deleting ? ["Deleting", "yes"] : null,
    ]), table([
      { title: "Cluster", cell: (c) => c.cluster },
      { title: "Desired reservation", cell: (c) => fmtRes((c.desired || {}).reservation) },
      { title: "Actual reservation", cell: (c) => fmtRes((c.actual || {}).reservation) },
      { title: "CPU allocation", cell: (c) => h("div.meter", bar(res((c.status || {}).allocation, "cpu"), Math.max(res((c.desired || {}).limit, "cpu"), res((c.status || {}).entitlement, "cpu"), res((c.desired || {}).reservation, "cpu"))), h("span.muted", num(res((c.status || {}).allocation, "cpu"), 2))) },
      { title: "Sync", cell: syncState },
      { title: "Message", cell: (c) => c.message || "" },
    ], p.clusters || [])));
  });
}

// syncState says whether a cluster's part of a global pool is as the
// federation wants it, in words of its own: cluster health has READY and
// PENDING, and a pool part being synced is neither.
function syncState(c) {
  if (c.inSync) return h("span.badge.s-ok", { dataset: { sync: "in-sync" } }, "in sync");
  if (!c.message) return h("span.badge.s-wait", { dataset: { sync: "syncing" } }, "syncing");
  return h("span.badge.s-warn", { dataset: { sync: "out-of-sync" }, title: c.message }, "out of sync");
}

function fmtRes(r) {
  const parts = kinds.map((k) => (res(r, k.key) ? `${k.label} ${amount(k.key, res(r, k.key))}` : null)).filter(Boolean);
  return parts.length ? parts.join(" · ") : h("span.muted", "—");
}

// ---------------------------------------------------------------- services

async function servicesPage(ctx) {
  const list = h("div");
  ctx.root.append(h("h1", "Federated services"), list);
  await ctx.live(list, async () => {
    const [[, byName], r] = await Promise.all([clusterMap(ctx.signal), get("/v1/federation/services", ctx.signal)]);
    return table([
      { title: "Service", cell: (s) => link("/ui/services/" + enc(s.id), s.spec.job.name || s.id) },
      { title: "Running", cls: "num", cell: (s) => `${s.running}/${s.desired}` },
      { title: "Per cluster", cell: (s) => h("span.chips", (s.clusters || []).map((c) => h("span.chip.small", clusterUI(byName[c.cluster], "/ui/jobs/" + enc(c.clusterJobId || ""), c.cluster), ` ${c.running}/${c.desired}`))) },
      { title: "Version", cell: (s) => s.specVersion },
      { title: "Rollout", cell: (s) => (s.rollout ? badge(s.rollout.state) : h("span.muted", "—")) },
      { title: "Created", cell: (s) => ago(s.createTime) },
    ], r.services || [], { empty: "No federated services." });
  });
}

function rolloutActions(s) {
  const st = s.rollout ? s.rollout.state : "";
  const act = (verb) => () => post(`/v1/federation/services/${enc(s.id)}:${verb}`);
  return h("div.toolbar.actions",
    actionButton("Pause", act("pause"), { id: "fpause-" + s.id, disabled: st !== "ROLLOUT_ROLLING" }),
    actionButton("Resume", act("resume"), { id: "fresume-" + s.id, disabled: st !== "ROLLOUT_PAUSED" }),
    actionButton("Abort", act("abort"), { id: "fabort-" + s.id, danger: true, confirm: true, disabled: !ROLLING.includes(st) }),
    actionButton("Rollback", act("rollback"), { id: "frollback-" + s.id, confirm: true, disabled: !st || /ROLLED_BACK|ROLLING_BACK/.test(st) }),
    // Offered only while a gated step waits for approval.
    s.rollout && s.rollout.approvalSince && /ROLLOUT_(ROLLING|PAUSED)$/.test(st) ? actionButton("Approve", act("approve"), { id: "fapprove-" + s.id }) : "");
}

// serviceRollout shows a rollout cluster by cluster.
function serviceRollout(s, byName, compact) {
  const r = s.rollout;
  if (!r) return h("p.muted", "No rollout yet.");
  return h("div.card.update", { dataset: { service: s.id, state: r.state } },
    h("h3", link("/ui/services/" + enc(s.id), s.spec.job.name || s.id), ` rollout ${r.id} `, badge(r.state), h("span.muted", ` v${r.fromVersion} → v${r.toVersion}`)),
    r.message ? h("p.reason", r.message) : "",
    r.waiting ? h("p.waiting", { dataset: { waiting: r.approvalSince ? "approval" : "soak" } }, `Waits for ${r.waiting} (since ${r.waitingSince})`) : "",
    h("ol.steps", (r.steps || []).map((st) => h("li.step.s-" + st.state.replace("STEP_", "").toLowerCase(),
      h("strong", clusterUI(byName[st.cluster], st.updateId ? "/ui/updates/" + enc(st.updateId) : "/ui/", st.cluster)), " ", badge(st.state),
      h("span.muted", ` ${st.desired} instances`), st.message ? h("div.muted", st.message) : ""))),
    compact ? "" : rolloutActions(s));
}

// serviceRebalance shows a service's latest rebalance: from which counts
// per cluster to which, what it waits for, and, while one is pending (its
// placement's rebalance is MANUAL), the button that starts it.
function serviceRebalance(s) {
  const r = s.rebalance;
  if (!r) return h("p.muted", "No rebalance yet: its clusters are those of its split at create.");
  const counts = (m) => Object.keys(m || {}).sort().map((k) => `${k}=${m[k]}`).join(" ") || "—";
  const pending = r.state === "REBALANCE_PENDING";
  return h("div.card.rebalance", { dataset: { service: s.id, state: r.state } },
    h("h3", `Rebalance ${r.id} `, pending ? h("span.badge.s-warn", { dataset: { rebalance: "pending" } }, "rebalance pending") : badge(r.state)),
    h("p.reason", r.reason || ""),
    h("p", `${counts(r.from)} → ${counts(r.to)} · ${r.moved || 0} moved`),
    r.waiting ? h("p.waiting", { dataset: { waiting: "rebalance" } }, `Waits for ${r.waiting} (since ${r.waitingSince})`) : "",
    pending ? h("div.toolbar.actions", actionButton("Rebalance", () => post(`/v1/federation/services/${enc(s.id)}:rebalance`), { id: "frebalance-" + s.id })) : "");
}

// serviceChange is the service page's update form and delete button. It
// is built once, outside the live part, so a refresh never wipes an edit.
async function serviceChange(ctx, id, into) {
  const s = (await get("/v1/federation/services/" + enc(id), ctx.signal)).service;
  const spec = h("textarea.specedit", { name: "job", rows: 14, spellcheck: "false", "aria-label": "The service's job spec, JSON" });
  spec.value = JSON.stringify(s.spec.job, null, 2);
  const update = actionButton("Update", async () => {
    let job;
    try {
      job = JSON.parse(spec.value);
    } catch (e) {
      throw new Error("job: not JSON: " + e.message);
    }
    await put("/v1/federation/services/" + enc(id), { job });
  }, { id: "fupdate-" + id });
  const del = actionButton("Delete", () => call("DELETE", "/v1/federation/services/" + enc(id)), { id: "fdelete-" + id, danger: true, confirm: true });
  into.append(section("Change",
    h("p.muted", "Update rolls the new job spec out cluster by cluster (as peloton fed service update does); a new instanceCount is split over the service's clusters in proportion to their parts. Delete stops and removes every cluster's part."),
    spec, h("div.toolbar.actions", update, del)));
}

async function servicePage(ctx, id) {
  const body = h("div");
  const change = h("div");
  ctx.root.append(h("p.crumbs", link("/ui/services", "Services"), " / ", id), body, change);
  serviceChange(ctx, id, change).catch((e) => change.append(errorBox(e)));
  await ctx.live(body, async () => {
    const [[, byName], r] = await Promise.all([clusterMap(ctx.signal), get("/v1/federation/services/" + enc(id), ctx.signal)]);
    const s = r.service;
    return [
      h("h1", s.spec.job.name || s.id),
      kv([["ID", h("code", s.id)], ["Running", `${s.running} of ${s.desired}`], ["Healthy", String(s.healthy)], ["Updated", String(s.updated)],
        ["Spec version", s.specVersion], ["Created", ago(s.createTime)], s.message ? ["Message", s.message] : null, s.deleting ? ["Deleting", "yes"] : null]),
      section("Per cluster", table([
        { title: "Cluster", cell: (c) => c.cluster },
        { title: "Job", cell: (c) => clusterUI(byName[c.cluster], "/ui/jobs/" + enc(c.clusterJobId || ""), c.clusterJobId || "") },
        { title: "State", cell: (c) => badge(c.state) },
        { title: "Running", cell: (c) => h("div.meter", bar(c.running, c.desired, { progress: true }), h("span.muted", `${c.running}/${c.desired}`)) },
        { title: "Healthy", cls: "num", cell: (c) => String(c.healthy || 0) },
        { title: "Updated", cls: "num", cell: (c) => String(c.updated || 0) },
        { title: "Max unavailable", cls: "num", cell: (c) => String(c.maxUnavailable) },
        { title: "Version", cell: (c) => c.specVersion },
        { title: "Message", cell: (c) => [c.failedOver ? "failed over · " : "", c.message || ""] },
      ], s.clusters || [])),
      section("Rollout", serviceRollout(s, byName, false)),
      section("Rebalance", serviceRebalance(s)),
    ];
  });
}

async function rolloutsPage(ctx) {
  const list = h("div");
  ctx.root.append(h("h1", "Rollouts"), h("p.muted", "Federated services' rollouts, cluster by cluster. Each cluster's own updates are on its UI's Updates page."), list);
  await ctx.live(list, async () => {
    const [[, byName], r] = await Promise.all([clusterMap(ctx.signal), get("/v1/federation/services", ctx.signal)]);
    const withRollout = (r.services || []).filter((s) => s.rollout);
    return withRollout.length ? withRollout.map((s) => serviceRollout(s, byName, false)) : h("p.muted", "No rollouts.");
  });
}

// -------------------------------------------------------------------- jobs

async function jobsPage(ctx) {
  const list = h("div");
  const search = h("input", { type: "search", placeholder: "Search names (/)", "aria-label": "Search by name" });
  const clusterSel = h("input", { placeholder: "cluster", "aria-label": "Cluster" });
  ctx.root.append(h("h1", "Federated jobs"), h("form.filters", { role: "search", onsubmit: (e) => e.preventDefault() }, search, clusterSel), list);
  await ctx.live(list, async () => {
    const [[, byName], jobs] = await Promise.all([clusterMap(ctx.signal),
      listAll("/v1/federation/jobs", { pageSize: 500, cluster: clusterSel.value.trim() }, "jobs", ctx.signal, 4)]);
    const q = search.value.trim().toLowerCase();
    const shown = jobs.filter((j) => !q || ((j.spec.job || {}).name || "").toLowerCase().includes(q));
    return table([
      { title: "Name", cell: (j) => link("/ui/jobs/" + enc(j.id), (j.spec.job || {}).name || j.id) },
      { title: "Dispatch", cell: (j) => badge(j.dispatchState) },
      { title: "Cluster", cell: (j) => j.cluster ? clusterUI(byName[j.cluster], "/ui/jobs/" + enc(j.clusterJobId), j.cluster) : "" },
      { title: "State", cell: (j) => (j.status ? badge(j.status.state) : "") },
      { title: "Created", cell: (j) => ago(j.createTime) },
    ], shown, { empty: "No federated jobs." });
  });
}

async function jobPage(ctx, id) {
  const body = h("div");
  ctx.root.append(h("p.crumbs", link("/ui/jobs", "Jobs"), " / ", id), body);
  await ctx.live(body, async () => {
    const [[, byName], r] = await Promise.all([clusterMap(ctx.signal), get("/v1/federation/jobs/" + enc(id), ctx.signal)]);
    const j = r.job;
    return [
      h("h1", (j.spec.job || {}).name || j.id, " ", badge(j.dispatchState)),
      kv([["ID", h("code", j.id)], ["Cluster", j.cluster ? clusterUI(byName[j.cluster], "/ui/jobs/" + enc(j.clusterJobId), `${j.cluster} · ${j.clusterJobId}`) : ""],
        ["State there", j.status ? badge(j.status.state) : ""], ["Message", j.message || ""], ["Created", ago(j.createTime)]]),
      h("div.toolbar.actions", actionButton("Kill", () => post(`/v1/federation/jobs/${enc(id)}:kill`), { danger: true, confirm: true, id: "fkill-" + id, disabled: j.killed || j.dispatchState === "DISPATCH_DONE" })),
      section("Attempts", table([
        { title: "Cluster", cell: (a) => a.cluster }, { title: "Job there", cell: (a) => a.clusterJobId },
        { title: "Dispatched", cell: (a) => ago(a.dispatchTime) }, { title: "Ended", cell: (a) => a.endReason || "" },
      ], j.attempts || [])),
    ];
  });
}

async function hostsPage(ctx) {
  const list = h("div");
  ctx.root.append(h("h1", "Hosts"), h("p", "Hosts belong to clusters: each cluster's UI has its hosts and partitions."), list);
  await ctx.live(list, async () => {
    const [cs] = await clusterMap(ctx.signal);
    return h("ul.plain", cs.map((c) => h("li", clusterUI(c, "/ui/hosts", `${c.name}: hosts`), " ", badge(c.state))));
  });
}
