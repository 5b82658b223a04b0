// cluster.js: the pages of one cluster stack's UI, over its REST API
// (/v1/jobs, /v1/pools, /v1/hosts, /v1/updates; /v1/partitions in
// partitions.js).
import { get, post, put, query, listAll, enc, requestId, ApiError, send, errorOf } from "./api.js";
import {
  h, replace, link, errorBox, table, badge, kinds, num, amount, bar, ago, actionButton,
  showFieldError, kv, section, hooks, zoneBadge,
} from "./dom.js";
import { partitionsPage, moveTable } from "./partitions.js";
import { InstanceGrid, legend } from "./grid.js";
import { diffLines } from "./diff.js";

export const clusterNav = [
  ["/ui/", "Overview", "o"],
  ["/ui/pools", "Pools", "p"],
  ["/ui/jobs", "Jobs", "j"],
  ["/ui/updates", "Updates", "u"],
  ["/ui/hosts", "Hosts", "h"],
  ["/ui/partitions", "Partitions", "t"],
  ["/ui/clusters", "Clusters", "c"],
];

export const clusterRoutes = [
  [/^\/ui\/?$/, overviewPage],
  [/^\/ui\/pools\/?$/, poolsPage],
  [/^\/ui\/pools\/(.+)$/, poolsPage],
  [/^\/ui\/jobs\/?$/, jobsPage],
  [/^\/ui\/jobs\/([^/]+)\/?$/, jobPage],
  [/^\/ui\/jobs\/([^/]+)\/tasks\/(\d+)\/?$/, taskPage],
  [/^\/ui\/updates\/?$/, updatesPage],
  [/^\/ui\/updates\/([^/]+)\/?$/, updatePage],
  [/^\/ui\/hosts\/?$/, hostsPage],
  [/^\/ui\/hosts\/([^/]+)\/?$/, hostsPage],
  [/^\/ui\/partitions\/?$/, partitionsPage],
  [/^\/ui\/clusters\/?$/, clustersInfoPage],
];

const ACTIVE_UPDATE = ["UPDATE_ROLLING_FORWARD", "UPDATE_PAUSED", "UPDATE_ROLLING_BACK"];
const short = (s) => String(s || "").replace(/^(JOB_|UPDATE_|HOST_)/, "");
const sum = (xs, f) => xs.reduce((a, x) => a + (Number(f(x)) || 0), 0);
const res = (r, k) => Number((r || {})[k] || 0);

// ---------------------------------------------------------------- overview

async function overviewPage(ctx) {
  const body = h("div.cols");
  ctx.root.append(h("h1", "Overview"), body);
  await ctx.live(body, async () => {
    const [hosts, pools, jobs, updates] = await Promise.all([
      get("/v1/hosts", ctx.signal), get("/v1/pools", ctx.signal),
      listAll("/v1/jobs", { pageSize: 500 }, "jobs", ctx.signal, 4), get("/v1/updates", ctx.signal),
    ]);
    const hs = hosts.hosts || [];
    const byState = {};
    // A host moving between partitions counts as moving, not as its
    // maintenance state (it takes no new work either way).
    hs.forEach((x) => { const st = isMoving(x) ? "HOST_MOVING" : x.state; byState[st] = (byState[st] || 0) + 1; });
    const capacity = kinds.map((k) => {
      const cap = sum(hs, (x) => res(x.capacity, k.key));
      const alloc = sum(hs, (x) => res(x.allocated, k.key));
      return cap || alloc ? [k, cap, alloc] : null;
    }).filter(Boolean);
    const counts = {};
    for (const j of jobs) for (const [s, n] of Object.entries((j.status || {}).taskCounts || {})) counts[s] = (counts[s] || 0) + n;
    const running = (updates.updates || []).filter((u) => ACTIVE_UPDATE.includes(u.status.state));
    return [
      section("Hosts",
        h("p.big", String(hs.length), h("span.muted", " hosts")),
        h("p", Object.entries(byState).map(([s, n]) => h("span.chip", badge(s), " ", n))),
        link("/ui/hosts", "All hosts →")),
      section("Capacity and allocation",
        capacity.length ? h("div.meters", capacity.map(([k, cap, alloc]) => h("div.meter",
          h("div.meterlabel", h("span", k.label), h("span.muted", `${amount(k.key, alloc)} of ${amount(k.key, cap)}`)),
          bar(alloc, cap)))) : h("p.muted", "no hosts")),
      section("Tasks by state",
        Object.keys(counts).length ? h("p", Object.entries(counts).sort().map(([s, n]) => h("span.chip", badge(s), " ", num(n))))
          : h("p.muted", "no tasks"),
        h("p.muted", `${jobs.length} jobs · ${(pools.pools || []).length} pools`)),
      section("Running updates", updateList(running, true, jobNames(jobs))),
      section("Alerts", alerts(hs, jobs)),
    ];
  });
}

// alerts names what an operator should look at: partitions nearly full,
// host agents that stopped reporting, jobs that wait and why.
function alerts(hosts, jobs) {
  const items = [];
  const parts = partitions(hosts);
  for (const p of parts) {
    for (const k of kinds) {
      const cap = p.capacity[k.key], alloc = p.allocated[k.key];
      if (cap > 0 && alloc / cap >= 0.9) {
        items.push(h("li.warn", `Partition ${p.name || "(none)"} is hot: ${k.label} ${Math.round((100 * alloc) / cap)}% allocated`));
      }
    }
  }
  const now = Date.now();
  for (const x of hosts) {
    if (!x.usage) continue;
    const t = Date.parse(x.usage.receiveTime);
    if (isFinite(t) && now - t > 30000) items.push(h("li.warn", `Host ${x.name}: agent last reported `, ago(x.usage.receiveTime)));
  }
  const withAgents = hosts.filter((x) => x.usage).length;
  if (withAgents > 0 && withAgents < hosts.length) {
    for (const x of hosts) if (!x.usage) items.push(h("li.warn", `Host ${x.name}: no report from its host agent`));
  }
  for (const j of jobs) {
    const st = j.status || {};
    const pending = (st.taskCounts || {}).PENDING || 0;
    if (st.state === "JOB_PENDING" || pending > 0) {
      items.push(h("li", link("/ui/jobs/" + enc(j.id), j.spec.name || j.id), ` waits (${pending} pending)`,
        st.message ? [": ", h("span.reason", st.message)] : ""));
    }
  }
  return items.length ? h("ul.alerts", items.slice(0, 50)) : h("p.muted", "Nothing needs attention.");
}

// isMoving says whether a host is on its way to another partition.
const isMoving = (x) => x.partitionState === "PARTITION_MOVING" || x.partitionState === "PARTITION_MOVE_DRAINED";

// zoneName is a Host.zone as a Partition.zones key ("green", ... "unknown").
const zoneName = (z) => String(z || "HOST_ZONE_UNKNOWN").replace(/^HOST_ZONE_/, "").toLowerCase();

function partitions(hosts) {
  const m = new Map();
  for (const x of hosts) {
    const name = x.partition || "";
    if (!m.has(name)) m.set(name, { name, hosts: 0, moving: 0, capacity: {}, allocated: {}, zones: {} });
    const p = m.get(name);
    p.hosts++;
    const z = zoneName(x.zone);
    p.zones[z] = (p.zones[z] || 0) + 1;
    if (isMoving(x)) p.moving++;
    for (const k of kinds) {
      p.capacity[k.key] = (p.capacity[k.key] || 0) + res(x.capacity, k.key);
      p.allocated[k.key] = (p.allocated[k.key] || 0) + res(x.allocated, k.key);
    }
  }
  return Array.from(m.values()).sort((a, b) => a.name.localeCompare(b.name));
}

// ------------------------------------------------------------------- pools

// poolKinds are the PoolSpec's groups, all in the form: an edit replaces
// the whole spec, so a group left out would be dropped.
const poolKinds = ["reservation", "limit", "share", "revocableLimit"];
const groupTitle = { reservation: "Reservation", limit: "Limit", share: "Share", revocableLimit: "Revocable limit" };

async function poolsPage(ctx, selected) {
  const formSlot = h("div");
  const tree = h("div");
  ctx.root.append(h("h1", "Pools"),
    h("p.muted", "Bars per resource kind: filled is allocation, shaded is demand; ticks mark reservation (R), entitlement (E) and limit (L)."),
    h("div.toolbar", h("button", { type: "button", dataset: { action: "new-pool" }, onclick: () => openForm(null) }, "New pool")),
    formSlot, tree);

  let pools = [];
  function openForm(pool) {
    replace(formSlot, poolForm(pool, () => { replace(formSlot); hooks.refresh(); }));
    formSlot.querySelector("input:not([readonly])").focus();
  }
  await ctx.live(tree, async () => {
    pools = (await get("/v1/pools", ctx.signal)).pools || [];
    return poolTree(pools, (p) => openForm(p));
  });
  if (selected) {
    const p = pools.find((x) => x.path === "/" + selected.replace(/^\//, ""));
    if (p) openForm(p);
    else replace(formSlot, errorBox(new ApiError(404, 5, `pool /${selected} does not exist`)));
  }
}

function poolTree(pools, onEdit) {
  return h("div.pooltree", pools.map((p) => {
    const depth = p.path === "/" ? 0 : p.path.split("/").length - 1;
    const st = p.status || {};
    const spec = p.spec || {};
    const leaf = !(p.children || []).length;
    return h("div.pool", { style: { marginLeft: depth * 1.2 + "rem" }, dataset: { path: p.path } },
      h("div.poolhead",
        h("strong", p.path), leaf ? h("span.muted", " leaf") : "",
        h("span.muted", ` · running ${st.runningTasks || 0} · pending ${st.pendingTasks || 0}`),
        p.path !== "/" ? h("button.small", { type: "button", onclick: () => onEdit(p), dataset: { key: "edit-" + p.path } }, "Edit") : ""),
      h("div.poolbars", kinds.map((k) => {
        const v = {
          res: res(spec.reservation, k.key), lim: res(spec.limit, k.key), ent: res(st.entitlement, k.key),
          alloc: res(st.allocation, k.key), dem: res(st.demand, k.key),
        };
        const scale = Math.max(v.res, v.lim, v.ent, v.alloc, v.dem);
        if (!scale) return null;
        const title = `${k.label}: allocation ${amount(k.key, v.alloc)}, demand ${amount(k.key, v.dem)}, ` +
          `reservation ${amount(k.key, v.res)}, entitlement ${amount(k.key, v.ent)}, limit ${v.lim ? amount(k.key, v.lim) : "none"}`;
        return h("div.poolbar",
          h("span.kind", k.label),
          bar(v.alloc, scale, { title, extra: [
            { value: v.dem, cls: "demand", title: "demand " + amount(k.key, v.dem) },
            { value: v.res, tick: true, cls: "res", title: "reservation " + amount(k.key, v.res) },
            { value: v.ent, tick: true, cls: "ent", title: "entitlement " + amount(k.key, v.ent) },
            { value: v.lim, tick: true, cls: "lim", title: "limit " + amount(k.key, v.lim) },
          ] }),
          h("span.nums.muted", `A ${amount(k.key, v.alloc)} · D ${amount(k.key, v.dem)} · R ${amount(k.key, v.res)} · E ${amount(k.key, v.ent)} · L ${v.lim ? amount(k.key, v.lim) : "∞"}`));
      })));
  }));
}

// poolForm creates a pool (pool null) or edits one; the API's refusal
// appears next to the field it names.
function poolForm(pool, done) {
  const editing = !!pool;
  const spec = (pool && pool.spec) || {};
  const field = (name, label, value, attrs = {}) => h("label.field", h("span", label),
    h("input", { name, id: "f-" + name.replace(/\W/g, "-"), dataset: { field: name }, value: value ?? "", ...attrs }));
  const groups = poolKinds.map((g) => h("fieldset", h("legend", groupTitle[g]),
    kinds.map((k) => field(`spec.${g}.${k.key}`, `${k.label}${k.unit ? " (" + k.unit + ")" : ""}`,
      spec[g] && spec[g][k.key] ? spec[g][k.key] : "", { inputmode: "decimal", placeholder: g === "share" ? "1" : "0" }))));
  const form = h("form.card.poolform", { novalidate: true },
    h("h2", editing ? `Edit ${pool.path}` : "New pool"),
    field("path", "Path", editing ? pool.path : "", { placeholder: "/org/team", readonly: editing, required: true }),
    h("div.fieldsets", groups),
    h("div.formerror"),
    h("div.buttons",
      h("button", { type: "submit", dataset: { action: "save-pool" } }, editing ? "Save" : "Create"),
      h("button", { type: "button", onclick: done }, "Cancel")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    const body = {};
    // Numbers go to the API as typed: it checks them and names the field
    // ("spec.limit.cpu: must be a finite number >= 0").
    for (const g of poolKinds) {
      for (const k of kinds) {
        const raw = String(data.get(`spec.${g}.${k.key}`) || "").trim();
        if (raw === "") continue;
        const n = Number(raw);
        if (!isFinite(n)) {
          showFieldError(form, new ApiError(400, 3, `spec.${g}.${k.key}: must be a number, got "${raw}"`));
          return;
        }
        (body[g] = body[g] || {})[k.key] = n;
      }
    }
    const path = String(data.get("path") || "").trim().replace(/^\/+/, "");
    try {
      if (!path) throw new ApiError(400, 3, "path: must not be empty");
      if (editing) await put(`/v1/pools/${path.split("/").map(enc).join("/")}${query({ version: pool.version })}`, body);
      else await post(`/v1/pools/${path.split("/").map(enc).join("/")}${query({ requestId: requestId() })}`, body);
      showFieldError(form, null);
      done();
    } catch (e) {
      showFieldError(form, e);
    }
  });
  return form;
}

// -------------------------------------------------------------------- jobs

const jobStates = ["JOB_INITIALIZED", "JOB_PENDING", "JOB_RUNNING", "JOB_SUCCEEDED", "JOB_FAILED", "JOB_KILLING", "JOB_KILLED"];
const jobTypes = ["BATCH", "SERVICE", "STATEFUL", "DAEMON"];

async function jobsPage(ctx) {
  const q = ctx.query;
  const f = {
    name: h("input", { type: "search", name: "name", placeholder: "Search names (/)", value: q.get("name") || "", "aria-label": "Search by name" }),
    type: h("select", { name: "type", "aria-label": "Type" }, h("option", { value: "" }, "any type"), jobTypes.map((t) => h("option", { value: t }, t))),
    pool: h("input", { name: "pool", placeholder: "pool", value: q.get("pool") || "", "aria-label": "Pool" }),
    state: h("select", { name: "state", "aria-label": "State" }, h("option", { value: "" }, "any state"), jobStates.map((s) => h("option", { value: s }, short(s)))),
    owner: h("input", { name: "owner", placeholder: "owner", value: q.get("owner") || "", "aria-label": "Owner (label owner)" }),
    // Finished jobs whose time to live passed are in the archive, listed
    // apart: ListJobs with archived.
    archived: h("input", { type: "checkbox", name: "archived", id: "jobs-archived", checked: q.get("archived") === "true" }),
  };
  f.type.value = q.get("type") || "";
  f.state.value = q.get("state") || "";
  const archivedToggle = h("label.toggle", { title: "List the archive of finished jobs instead of the live jobs" }, f.archived, " archived");
  const list = h("div");
  const filters = h("form.filters", { role: "search" }, Object.values(f).filter((el) => el !== f.archived), archivedToggle);
  ctx.root.append(h("h1", "Jobs"), filters, list);
  const refresh = () => {
    const params = new URLSearchParams();
    for (const [k, el] of Object.entries(f)) {
      if (el === f.archived) { if (el.checked) params.set(k, "true"); } else if (el.value) params.set(k, el.value);
    }
    history.replaceState(null, "", "/ui/jobs" + (params.toString() ? "?" + params : ""));
    hooks.refresh();
  };
  let timer = 0;
  filters.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(refresh, 250); });
  filters.addEventListener("submit", (ev) => { ev.preventDefault(); refresh(); });
  await ctx.live(list, async () => {
    const archived = f.archived.checked;
    const jobs = await listAll("/v1/jobs", {
      pageSize: 500, name: f.name.value.trim(), pool: f.pool.value.trim(), states: f.state.value || undefined,
      archived: archived ? "true" : undefined,
    }, "jobs", ctx.signal, 10);
    const owner = f.owner.value.trim().toLowerCase();
    const shown = jobs.filter((j) => (!f.type.value || (j.spec.type || "BATCH") === f.type.value) &&
      (!owner || ownerOf(j).toLowerCase().includes(owner)));
    return [h("p.muted", `${shown.length} of ${jobs.length} ${archived ? "archived " : ""}jobs`), jobTable(shown)];
  });
}

function ownerOf(j) {
  const l = j.spec.labels || {};
  return l.owner || l.team || "";
}

function jobTable(jobs) {
  return table([
    { title: "Name", cell: (j) => link("/ui/jobs/" + enc(j.id), j.spec.name || "(unnamed)") },
    { title: "Type", cell: (j) => j.spec.type || "BATCH" },
    { title: "Pool", cell: (j) => j.spec.pool },
    { title: "State", cell: (j) => [badge(j.status.state), j.status.archived ? [" ", archivedBadge()] : ""] },
    { title: "Instances", cls: "num", cell: (j) => num(j.spec.instanceCount) },
    { title: "Tasks", cell: (j) => taskCountChips(j.status.taskCounts) },
    { title: "Owner", cell: (j) => ownerOf(j) },
    { title: "Created", cell: (j) => ago(j.status.createTime) },
  ], jobs, { empty: "No jobs match." });
}

// archivedBadge marks a job read from the archive of finished jobs.
function archivedBadge() {
  return h("span.badge.s-none.archived", { title: "finished, and moved to the archive of finished jobs: it can no longer change" }, "ARCHIVED");
}

function taskCountChips(counts) {
  return h("span.chips", Object.entries(counts || {}).map(([s, n]) => h("span.chip.small", badge(s), " ", num(n))));
}

async function jobPage(ctx, id) {
  const head = h("div");
  const gridSlot = h("section.card", h("h2", "Instances"));
  const detail = h("div");
  ctx.root.append(head, gridSlot, detail);
  let job = null;
  const grid = new InstanceGrid({
    onSelect: (i) => { selected.value = String(i); showInstance(i); },
    onOpen: (i) => hooks.go(`/ui/jobs/${enc(id)}/tasks/${i}`),
  });
  ctx.onLeave(() => grid.dispose());
  const legendSlot = h("div");
  const instSlot = h("div.instance");
  const selected = h("input", { type: "number", min: 0, placeholder: "instance", "aria-label": "Go to instance", class: "narrow" });
  selected.addEventListener("change", () => { const i = Number(selected.value); if (i >= 0) showInstance(i); });
  gridSlot.append(h("div.toolbar", legendSlot, h("label", "Instance ", selected)), grid.el, instSlot);

  await ctx.live(head, async () => {
    job = (await get("/v1/jobs/" + enc(id), ctx.signal)).job;
    return jobHeader(job);
  });
  if (!job) return;
  // The grid only needs states, but ListTasks answers whole tasks (about
  // 1 KiB each): the first, small page is drawn as soon as it arrives (it
  // fills the screen), the rest as they come. A large job is read again
  // less often than the poll: at most every five times as long as the
  // last read took.
  let lastRead = 0, readTook = 0, lastLegend = null;
  await ctx.live(legendSlot, async () => {
    if (lastLegend && Date.now() - lastRead < 5 * readTook) return lastLegend;
    const start = Date.now();
    const total = job.spec.instanceCount || 0; // holes (spec.removedInstances) are not listed
    const tasks = await listAll(`/v1/jobs/${enc(id)}/tasks`, { pageSize: 5000 }, "tasks", ctx.signal, 30,
      (sofar) => grid.set(sofar, total), 1000);
    grid.set(tasks);
    lastRead = Date.now();
    readTook = lastRead - start;
    lastLegend = legend(tasks);
    return lastLegend;
  });
  let shown = -1;
  async function showInstance(i) {
    shown = i;
    grid.select(grid.cellOf(i), false);
    try {
      const t = (await get(`/v1/jobs/${enc(id)}/tasks/${i}`, ctx.signal)).task;
      if (shown === i) replace(instSlot, instancePanel(id, t, true, job.status.archived));
    } catch (e) {
      if (e.name !== "AbortError") replace(instSlot, errorBox(e, `instance ${i}`));
    }
  }
  ctx.every(() => (shown >= 0 ? showInstance(shown) : null));
  // Versions and events are rebuilt only when they change, so a diff
  // being read is not reset by every poll.
  let seen = "", nodes = [];
  await ctx.live(detail, async () => {
    const [versions, updates] = await Promise.all([
      get(`/v1/jobs/${enc(id)}/versions`, ctx.signal), get("/v1/updates" + query({ jobId: id }), ctx.signal),
    ]);
    const key = JSON.stringify([(versions.versions || []).map((v) => v.version), (updates.updates || []).map((u) => u.status.state), job.status.state]);
    if (key !== seen) {
      seen = key;
      nodes = [versionsCard(versions.versions || []), eventsCard(job, versions.versions || [], updates.updates || [])];
    }
    return nodes;
  });
}

function jobHeader(job) {
  const st = job.status, spec = job.spec;
  const id = job.id;
  const running = !/SUCCEEDED|FAILED|KILLED/.test(st.state);
  if (st.archived) {
    // An archived job can no longer change: no actions but its updates.
    return [
      h("h1", spec.name || id, " ", badge(st.state), " ", archivedBadge()),
      h("p.notice", { id: "archived-note" }, "This job finished and was moved to the archive of finished jobs: it is shown as it was when it finished, and can no longer change."),
      kv([
        ["ID", h("code", id)], ["Type", spec.type || "BATCH"], ["Pool", spec.pool],
        ["Instances", num(spec.instanceCount)], ["Spec version", st.specVersion],
        ["Created", ago(st.createTime)], ["Finished", ago(st.completionTime)], ["Tasks", taskCountChips(st.taskCounts)],
        st.message ? ["Message", h("span.reason", st.message)] : null,
        ownerOf(job) ? ["Owner", ownerOf(job)] : null,
      ]),
    ];
  }
  const scaleInput = h("input", { type: "number", min: 0, value: spec.instanceCount, "aria-label": "Instance count", class: "narrow", dataset: { key: "scale-n" } });
  return [
    h("h1", spec.name || id, " ", badge(st.state)),
    kv([
      ["ID", h("code", id)], ["Type", spec.type || "BATCH"], ["Pool", link("/ui/pools/" + spec.pool.replace(/^\//, ""), spec.pool)],
      ["Instances", num(spec.instanceCount)], ["Goal", short(st.goalState)], ["Spec version", st.specVersion],
      ["Created", ago(st.createTime)], ["Tasks", taskCountChips(st.taskCounts)],
      st.message ? ["Message", h("span.reason", st.message)] : null,
      ownerOf(job) ? ["Owner", ownerOf(job)] : null,
    ]),
    st.reservation ? reservationCard(st.reservation) : "",
    h("div.toolbar.actions",
      actionButton("Kill job", () => post(`/v1/jobs/${enc(id)}:cancel`), { danger: true, confirm: true, id: "kill-job", disabled: !running }),
      actionButton("Restart", () => post(`/v1/jobs/${enc(id)}:restart`, {}), { confirm: true, id: "restart-job" }),
      h("span.group", scaleInput,
        actionButton("Scale", () => post(`/v1/jobs/${enc(id)}:scale`, { instanceCount: Number(scaleInput.value), version: st.specVersion }), { id: "scale-job" })),
      link(`/ui/updates?job=${enc(id)}`, "Updates of this job")),
  ];
}

// reservationCard shows the hosts set aside for one of the job's gangs that
// waited too long (job get's status.reservation): since when, whether they
// hold the whole gang yet, and per host what it holds and how much of that
// is idle.
function reservationCard(r) {
  const first = r.firstInstance || 0, last = first + Math.max(r.members || 0, 1) - 1;
  const gang = (r.gang ? `gang ${r.gang} ` : "") + `(instances ${first}-${last})`;
  const state = r.complete
    ? "complete: the hosts hold the whole gang, their preemptible work is being preempted"
    : "setting hosts aside as they free up; only preemptible work may use them meanwhile";
  const res = (x) => (x ? `${amount("cpu", x.cpu)} CPU, ${amount("memoryMb", x.memoryMb)}` : "");
  return h("section.card", { id: "reservation" }, h("h2", "Reservation"),
    h("p", gang, " in pool ", r.pool, ", since ", ago(r.since), ": ", state),
    table([
      { title: "Host", cell: (x) => link("/ui/hosts/" + enc(x.name), x.name) },
      { title: "Held", cell: (x) => res(x.held) },
      { title: "Idle", cell: (x) => res(x.free) },
      { title: "Since", cell: (x) => ago(x.since) },
    ], r.hosts || [], { empty: "No host set aside yet." }));
}

// instancePanel shows one instance: its current run and every run before.
function instancePanel(jobId, t, withLink, archived) {
  const st = t.status;
  const base = `/v1/jobs/${enc(jobId)}/tasks/${t.instanceId}`;
  return h("div.card.inner",
    h("h3", `Instance ${t.instanceId} `, badge(st.state),
      withLink ? [" ", link(`/ui/jobs/${enc(jobId)}/tasks/${t.instanceId}`, "open · logs")] : ""),
    kv([
      ["Run", `${st.runId}`], ["Host", st.host ? link("/ui/hosts/" + enc(st.host), st.host) : ""], ["Exit code", String(st.exitCode)],
      ["Reason", st.reason || ""], ["Message", st.message || ""],
      st.pendingReason ? ["Waits", h("span.reason", st.pendingReason)] : null,
      ["Failures", String(st.failureCount || 0)], ["Started", ago(st.startTime)],
      st.health && st.health !== "HEALTH_UNKNOWN" ? ["Health", badge(st.health)] : null,
    ]),
    archived ? "" : h("div.toolbar.actions",
      actionButton("Kill task", () => post(base + ":kill"), { danger: true, confirm: !withLink ? false : true, id: "kill-task-" + t.instanceId,
        disabled: /SUCCEEDED|FAILED|KILLED|LOST/.test(st.state) && st.goalState !== "RUNNING" })),
    runsTable(st));
}

// runsTable groups an instance's transitions by run: how each run ended.
function runsTable(st) {
  const runs = new Map();
  for (const tr of st.history || []) {
    if (!runs.has(tr.runId)) runs.set(tr.runId, { runId: tr.runId, first: tr.time, last: tr, reasons: [] });
    const r = runs.get(tr.runId);
    r.last = tr;
    if (tr.reason) r.reasons.push(tr.reason);
  }
  const rows = Array.from(runs.values()).sort((a, b) => b.runId - a.runId);
  return table([
    { title: "Run", cls: "num", cell: (r) => String(r.runId) },
    { title: "Last state", cell: (r) => badge(r.last.state) },
    { title: "Exit code", cls: "num", cell: (r) => (r.runId === st.runId && /SUCCEEDED|FAILED|KILLED|LOST/.test(st.state) ? String(st.exitCode) : "") },
    { title: "Reasons", cell: (r) => r.reasons.join(", ") },
    { title: "Started", cell: (r) => ago(r.first) },
    { title: "Last change", cell: (r) => ago(r.last.time) },
  ], rows, { empty: "no runs recorded" });
}

function versionsCard(versions) {
  const sel = h("select", { "aria-label": "Version to compare" },
    versions.slice().reverse().map((v) => h("option", { value: v.version }, `v${v.version} · ${v.cause}`)));
  const out = h("div");
  const show = () => {
    const i = versions.findIndex((v) => v.version === sel.value);
    if (i < 0) return;
    const cur = JSON.stringify(versions[i].spec, null, 2).split("\n");
    const prev = i > 0 ? JSON.stringify(versions[i - 1].spec, null, 2).split("\n") : [];
    replace(out, h("p.muted", i > 0 ? `v${versions[i - 1].version} → v${versions[i].version}` : "the first version"),
      h("pre.diff", { dataset: { keepScroll: "diff" } }, diffLines(prev, cur).map(([op, line]) =>
        h("span." + (op === "+" ? "add" : op === "-" ? "del" : "same"), op + " " + line + "\n"))));
  };
  sel.addEventListener("change", show);
  show();
  return section("Spec versions",
    table([
      { title: "Version", cls: "num", cell: (v) => v.version },
      { title: "Cause", cell: (v) => v.cause },
      { title: "Created", cell: (v) => ago(v.createTime) },
    ], versions.slice().reverse()),
    h("div.toolbar", h("label", "Diff of ", sel, " against the version before")), out);
}

function eventsCard(job, versions, updates) {
  const ev = [];
  ev.push({ t: job.status.createTime, what: "job created" });
  if (job.status.startTime && !job.status.startTime.startsWith("0001")) ev.push({ t: job.status.startTime, what: "job started" });
  if (job.status.completionTime && !job.status.completionTime.startsWith("0001")) ev.push({ t: job.status.completionTime, what: "job ended " + short(job.status.state) });
  for (const v of versions) ev.push({ t: v.createTime, what: `spec version ${v.version}: ${v.cause}` });
  for (const u of updates) {
    ev.push({ t: u.status.createTime, what: h("span", "update ", link("/ui/updates/" + enc(u.id), u.id), ` (${u.cause || "update"}) created`) });
    if (u.status.completionTime && !u.status.completionTime.startsWith("0001")) ev.push({ t: u.status.completionTime, what: h("span", "update ", link("/ui/updates/" + enc(u.id), u.id), " ended ", badge(u.status.state)) });
  }
  ev.sort((a, b) => Date.parse(b.t) - Date.parse(a.t));
  return section("Events", h("ul.events", ev.map((e) => h("li", ago(e.t), " ", e.what))));
}

// -------------------------------------------------------------------- task

async function taskPage(ctx, jobId, inst) {
  const head = h("div");
  ctx.root.append(h("p.crumbs", link("/ui/jobs", "Jobs"), " / ", link("/ui/jobs/" + enc(jobId), jobId), ` / instance ${inst}`),
    h("h1", `Instance ${inst}`), head);
  let task = null;
  await ctx.live(head, async () => {
    // The job says whether it is archived: an archived job's instance
    // has no actions.
    const [tr, jr] = await Promise.all([get(`/v1/jobs/${enc(jobId)}/tasks/${inst}`, ctx.signal), get(`/v1/jobs/${enc(jobId)}`, ctx.signal)]);
    task = tr.task;
    const archived = !!(jr.job && jr.job.status && jr.job.status.archived);
    return h("div", archived ? h("p", { id: "archived-task" }, archivedBadge(), " this instance's job finished and was moved to the archive") : "",
      instancePanel(jobId, task, false, archived));
  });
  if (!task) return;
  ctx.root.append(logsCard(ctx, jobId, inst, task.status.runId));
}

// logsCard tails a run's stdout or stderr through the streaming logs API
// (newline-delimited {"result":{"data":<base64>}}), keeping the last
// MAX_LOG bytes on screen.
const MAX_LOG = 512 * 1024;

function logsCard(ctx, jobId, inst, runId) {
  const pre = h("pre.log", { tabindex: 0, "aria-label": "Log output", "aria-live": "off" });
  const state = h("span.muted");
  const streamSel = h("select", { "aria-label": "Stream" }, h("option", { value: "STDOUT" }, "stdout"), h("option", { value: "STDERR" }, "stderr"));
  const follow = h("input", { type: "checkbox", checked: true });
  let abort = null;
  async function tail() {
    if (abort) abort.abort();
    abort = new AbortController();
    const mine = abort;
    ctx.onLeave(() => mine.abort());
    replace(pre);
    replace(state, "connecting…");
    let text = "";
    const url = `/v1/jobs/${enc(jobId)}/tasks/${inst}/logs` + query({ runId, stream: streamSel.value, follow: follow.checked ? "true" : "" });
    try {
      // Through send(), so the stored token goes with it (a 401 signs out).
      const resp = await send(url, { signal: mine.signal });
      if (!resp.ok) throw await errorOf(resp);
      replace(state, follow.checked ? "following" : "reading");
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line) continue;
          const msg = JSON.parse(line);
          if (msg.error) throw new ApiError(0, msg.error.code, msg.error.message);
          const data = msg.result && msg.result.data;
          if (data) text += new TextDecoder().decode(Uint8Array.from(atob(data), (c) => c.charCodeAt(0)));
        }
        if (text.length > MAX_LOG) text = "…\n" + text.slice(-MAX_LOG);
        const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.textContent = text;
        if (atBottom) pre.scrollTop = pre.scrollHeight;
      }
      replace(state, "end of log");
    } catch (e) {
      if (e.name === "AbortError") return;
      replace(state, errorBox(e, "logs"));
    }
  }
  streamSel.addEventListener("change", tail);
  follow.addEventListener("change", tail);
  tail();
  return section(`Logs of run ${runId}`, h("div.toolbar", streamSel, h("label", follow, " follow"), state), pre);
}

// ----------------------------------------------------------------- updates

async function updatesPage(ctx) {
  const job = ctx.query.get("job") || "";
  const list = h("div");
  ctx.root.append(h("h1", "Updates"), job ? h("p", "Updates of job ", link("/ui/jobs/" + enc(job), job), " · ", link("/ui/updates", "all")) : "", list);
  await ctx.live(list, async () => {
    const [r, jobs] = await Promise.all([get("/v1/updates" + query({ jobId: job }), ctx.signal),
      listAll("/v1/jobs", { pageSize: 500 }, "jobs", ctx.signal, 4)]);
    return updateList(r.updates || [], false, jobNames(jobs));
  });
}

function updateList(updates, compact, names) {
  if (!updates.length) return h("p.muted", "No updates.");
  return h("div.updates", updates.map((u) => updateCard(u, compact, names)));
}

function jobNames(jobs) {
  return Object.fromEntries(jobs.map((j) => [j.id, j.spec.name]));
}

// batches draws an update's progress one segment per batch.
function batches(u) {
  const st = u.status;
  const total = st.instancesTotal || 0;
  const size = Math.max(1, (u.spec || {}).batchSize || 1);
  const n = Math.max(1, Math.ceil(total / size));
  const done = st.instancesDone || 0;
  const failed = st.instancesFailed || 0;
  const segs = [];
  const shown = Math.min(n, 200);
  for (let b = 0; b < shown; b++) {
    const lo = Math.floor((b * total) / shown), hi = Math.floor(((b + 1) * total) / shown);
    const cls = hi <= done ? "done" : lo < done + (st.instancesCurrent || []).length && lo >= done - size ? "current" : "todo";
    segs.push(h("span.seg." + cls, { title: `batch ${b + 1}: instances ${lo}–${Math.max(lo, hi - 1)}` }));
  }
  return h("div.batches", { role: "img", "aria-label": `${done} of ${total} done, ${failed} failed, batch size ${size}` },
    segs, h("span.muted", ` ${done}/${total} done`, failed ? `, ${failed} failed` : "", ` · ${n} batch${n === 1 ? "" : "es"} of ${size}`));
}

function updateActions(u) {
  const s = u.status.state;
  const act = (verb) => () => post(`/v1/updates/${enc(u.id)}:${verb}`);
  const active = s === "UPDATE_ROLLING_FORWARD" || s === "UPDATE_ROLLING_BACK";
  return h("div.toolbar.actions",
    actionButton("Pause", act("pause"), { id: "pause-" + u.id, disabled: !active }),
    actionButton("Resume", act("resume"), { id: "resume-" + u.id, disabled: s !== "UPDATE_PAUSED" }),
    actionButton("Abort", act("abort"), { id: "abort-" + u.id, danger: true, confirm: true, disabled: !ACTIVE_UPDATE.includes(s) }),
    actionButton("Rollback", act("rollback"), { id: "rollback-" + u.id, confirm: true,
      disabled: !!u.rollbackVersion && u.rollbackVersion !== "0" || s === "UPDATE_ROLLED_BACK" }));
}

function updateCard(u, compact, names = {}) {
  const st = u.status;
  return h("div.card.update", { dataset: { update: u.id, state: st.state } },
    h("h3", link("/ui/jobs/" + enc(u.jobId), names[u.jobId] || u.jobId), " ", badge(st.state), " ",
      h("span.muted", "update "), link("/ui/updates/" + enc(u.id), u.id)),
    h("p.muted", `v${u.fromVersion} → v${u.toVersion} · ${u.cause || "update"} · `, ago(st.createTime),
      st.message ? [" · ", h("span.reason", st.message)] : ""),
    batches(u),
    compact ? "" : updateActions(u));
}

async function updatePage(ctx, id) {
  const body = h("div");
  ctx.root.append(h("p.crumbs", link("/ui/updates", "Updates"), " / ", id), h("h1", "Update " + id), body);
  await ctx.live(body, async () => {
    const u = (await get("/v1/updates/" + enc(id), ctx.signal)).update;
    const st = u.status, sp = u.spec || {};
    const job = await get("/v1/jobs/" + enc(u.jobId), ctx.signal).catch(() => null);
    return [
      updateCard(u, false, job ? { [u.jobId]: job.job.spec.name } : {}),
      section("Details", kv([
        ["Job", link("/ui/jobs/" + enc(u.jobId), u.jobId)], ["From → to", `v${u.fromVersion} → v${u.toVersion}`],
        ["Batch size", String(sp.batchSize || 1)], ["Max unavailable", String(sp.maxUnavailable || sp.batchSize || 1)],
        ["In place", sp.inPlace ? "yes" : "no"], ["Rollback on failure", sp.rollbackOnFailure ? "yes" : "no"],
        ["Min ready", `${sp.minReadySeconds || 0}s`], ["Now replacing", (st.instancesCurrent || []).join(", ")],
        ["Failed instances", (st.failedInstances || []).join(", ")], ["Instances", (u.instances || []).length ? `${u.instances.length}` : "all"],
        u.rollbackVersion && u.rollbackVersion !== "0" ? ["Rollback version", u.rollbackVersion] : null,
        ["Updated", ago(st.updateTime)],
      ])),
    ];
  });
}

// ------------------------------------------------------------------- hosts

async function hostsPage(ctx, only) {
  const summary = h("div");
  const list = h("div");
  ctx.root.append(h("h1", only ? "Host " + only : "Hosts and partitions"),
    only ? h("p.crumbs", link("/ui/hosts", "All hosts"), " · ", link("/ui/partitions", "Partitions")) : "", summary, list);
  await ctx.live(list, async () => {
    let hosts = (await get("/v1/hosts" + query({ includeRuns: only ? "true" : "" }), ctx.signal)).hosts || [];
    if (only) {
      hosts = hosts.filter((x) => x.name === only);
      if (!hosts.length) return errorBox(new ApiError(404, 5, `host ${only} does not exist`));
      // The host's own moves: a failed read shows in their card only.
      const moves = await get("/v1/partitions/moves" + query({ host: only, limit: 50 }), ctx.signal)
        .then((r) => moveTable(r.moves || []), (e) => { if (e.name === "AbortError") throw e; return errorBox(e); });
      const tasks = await hostTasks(hosts[0].runs || [], ctx.signal);
      replace(summary, hostDetail(hosts[0]), section("Tasks", tasks), section("Moves", moves,
        h("p", link("/ui/partitions" + query({ host: only }), "On the partitions page →"))));
      return hostTable(hosts);
    }
    replace(summary, partitionCard(partitions(hosts), hosts));
    return hostTable(hosts);
  });
}

// hostTasks lists the runs a host holds (ListHosts with includeRuns) with
// each instance's state, read per instance (GetTask): as many reads as the
// host has runs, at most hostTaskLimit of them, plus one GetJob per job
// for its name; no scan of any job.
const hostTaskLimit = 100;

async function hostTasks(runs, signal) {
  const shown = runs.slice().sort((a, b) => (a.jobId + a.taskId).localeCompare(b.jobId + b.taskId)).slice(0, hostTaskLimit);
  // A run's taskId is <jobId>-<instance>-<run>.
  const rows = await Promise.all(shown.map(async (r) => {
    const inst = Number(r.taskId.slice(r.jobId.length + 1).split("-")[0]);
    const t = await get(`/v1/jobs/${enc(r.jobId)}/tasks/${inst}`, signal).then((x) => x.task, (e) => { if (e.name === "AbortError") throw e; return null; });
    return { run: r, inst, task: t };
  }));
  // Each job's name, read once per job the host runs.
  const names = new Map(await Promise.all([...new Set(shown.map((r) => r.jobId))].map((id) =>
    get("/v1/jobs/" + enc(id), signal).then((x) => [id, x.job.spec.name || id], (e) => { if (e.name === "AbortError") throw e; return [id, id]; }))));
  return [
    table([
      { title: "Job", cell: (x) => link("/ui/jobs/" + enc(x.run.jobId), names.get(x.run.jobId)) },
      { title: "Instance", cls: "num", cell: (x) => link(`/ui/jobs/${enc(x.run.jobId)}/tasks/${x.inst}`, String(x.inst)) },
      { title: "State", cell: (x) => x.task ? badge((x.task.status || {}).state) : h("span.muted", "unknown") },
      { title: "Run", cell: (x) => h("span.muted", x.run.taskId) },
    ], rows, { empty: "No tasks on this host.", rowAttrs: (x) => ({ dataset: { hostTask: x.run.taskId } }) }),
    runs.length > shown.length ? h("p.muted", `${hostTaskLimit} of ${runs.length} runs shown`) : "",
  ];
}

function partitionCard(parts, hosts) {
  const moving = hosts.filter((x) => x.partitionState && x.partitionState !== "PARTITION_SETTLED" && x.partitionState !== "PARTITION_MOVE_STATE_UNSPECIFIED");
  return section("Partitions",
    table([
      { title: "Partition", cell: (p) => p.name || h("span.muted", "(none)") },
      { title: "Hosts", cls: "num", cell: (p) => String(p.hosts) },
      { title: "Moving", cls: "num", cell: (p) => String(p.moving) },
      ...kinds.slice(0, 2).map((k) => ({ title: k.label, cell: (p) => h("div.meter",
        bar(p.allocated[k.key], p.capacity[k.key]), h("span.muted", `${amount(k.key, p.allocated[k.key])} / ${amount(k.key, p.capacity[k.key])}`)) })),
      { title: "Zones", cell: (p) => h("span.chips", Object.entries(p.zones).sort().map(([z, n]) => h("span.chip.small", zoneBadge(z), " ", String(n)))) },
    ], parts),
    moving.length ? h("ul.events", moving.map((x) => h("li", h("strong", x.name), ` → ${x.targetPartition}: `, badge(x.partitionState), " ", x.partitionMessage || ""))) : "",
    h("p", link("/ui/partitions", "Pressure, oversubscription, sizes over time and every move →")));
}

// hostDetail shows what the table leaves out: labels, every resource kind,
// the host agent's last report and the partition move.
function hostDetail(x) {
  return section("Details", kv([
    ["State", badge(x.state)], ["Partition", x.partition || ""],
    x.partitionState && x.partitionState !== "PARTITION_SETTLED" ? ["Partition move", [badge(x.partitionState), " → ", x.targetPartition || "", " ", x.partitionMessage || ""]] : null,
    ["Zone", zoneBadge(x.zone)],
    ["Oversubscription", x.oversubscriptionFactor > 1 ? `×${Number(x.oversubscriptionFactor).toFixed(2)} of its CPU for revocable work` : "×1.00 (none)"],
    ["Labels", h("span.chips", Object.entries(x.labels || {}).map(([k, v]) => h("span.chip.small", `${k}=${v}`)))],
    ...kinds.map((k) => [k.label, `${amount(k.key, res(x.allocated, k.key))} of ${amount(k.key, res(x.capacity, k.key))} allocated` +
      (x.slack ? `, slack ${amount(k.key, res(x.slack, k.key))}` : "") + (x.revocable ? `, revocable ${amount(k.key, res(x.revocable, k.key))}` : "")]),
    ["Agent", x.usage ? h("span", `${x.usage.agentId} (${x.usage.source}), report ${x.usage.sequence}, `, ago(x.usage.receiveTime)) : h("span.muted", "no report")],
    ["Maintenance", x.maintenanceMessage || ""],
  ]));
}

// maintenanceSummary is the first clause of what maintenance or a
// partition move is doing ("draining: 2 tasks left", "moving to batch:
// draining 1 task"), at most 48 characters; the cell's title has it whole.
function maintenanceSummary(x) {
  const full = x.maintenanceMessage || x.partitionMessage || "";
  const s = full.split(";")[0].replace(/^moving to partition /, "moving to ");
  return s.length > 48 ? s.slice(0, 47) + "…" : s;
}

function maintenanceCell(x) {
  const full = [x.maintenanceMessage, x.partitionMessage].filter(Boolean).join("\n");
  return full ? h("span.maint", { title: full }, maintenanceSummary(x)) : "";
}

function hostTable(hosts) {
  const maint = (verb, name) => () => post(`/v1/hosts:${verb}`, { hosts: [name] });
  const cols = [
    { title: "Host", cell: (x) => h("strong", link("/ui/hosts/" + enc(x.name), x.name)) },
    { title: "Partition", cell: (x) => [x.partition || "", isMoving(x) ? [" → ", x.targetPartition] : ""] },
    { title: "Zone", cell: (x) => zoneBadge(x.zone) },
    { title: "State", cell: (x) => badge(x.state) },
    { title: "Tasks", cls: "num", cell: (x) => String(x.taskCount || 0) },
    { title: "CPU alloc", cell: (x) => h("div.meter", bar(res(x.allocated, "cpu"), res(x.capacity, "cpu")), h("span.muted", `${num(res(x.allocated, "cpu"), 2)} / ${num(res(x.capacity, "cpu"), 2)}`)) },
    { title: "Mem alloc", cell: (x) => h("div.meter", bar(res(x.allocated, "memoryMb"), res(x.capacity, "memoryMb")), h("span.muted", `${amount("memoryMb", res(x.allocated, "memoryMb"))} / ${amount("memoryMb", res(x.capacity, "memoryMb"))}`)) },
    { title: "Usage", cell: (x) => x.usage ? h("span", `cpu ${num(x.usage.cpu, 2)} · mem ${amount("memoryMb", x.usage.memoryUsedMb)} · `, ago(x.usage.receiveTime)) : h("span.muted", "no report") },
    { title: "Slack", cell: (x) => x.slack ? `cpu ${num(res(x.slack, "cpu"), 2)} · ${amount("memoryMb", res(x.slack, "memoryMb"))}` : "" },
    { title: "Maintenance", cell: (x) => maintenanceCell(x) },
    { title: "", cell: (x) => isMoving(x)
      ? actionButton("Cancel move", () => post(`/v1/hosts/${enc(x.name)}:move`, { cancel: true }), { id: "cancel-move-" + x.name, confirm: true })
      : x.state === "HOST_UP" ? actionButton("Drain", maint("startMaintenance", x.name), { id: "drain-" + x.name, confirm: true })
      : actionButton("Complete maintenance", maint("completeMaintenance", x.name), { id: "complete-" + x.name, disabled: x.state === "HOST_DOWN" }) },
  ].filter(Boolean);
  return table(cols, hosts, { empty: "No hosts.", rowAttrs: (x) => ({ dataset: { host: x.name, state: x.state } }) });
}

// -------------------------------------------------------------- clusters

// federationUI is the URL of this cluster's federation's UI when the
// server said it (peloton up with a federation), else "".
function federationUI() {
  const meta = document.querySelector('meta[name="peloton-federation-ui"]');
  const v = meta ? meta.content : "";
  if (!v || v.includes("{{")) return "";
  try {
    const u = new URL(v);
    if (["0.0.0.0", "[::]", ""].includes(u.hostname)) u.hostname = location.hostname;
    return u.href;
  } catch {
    return "";
  }
}

async function clustersInfoPage(ctx) {
  const fed = federationUI();
  ctx.root.append(h("h1", "Clusters"),
    fed ? h("p.fedlink", "This cluster belongs to a federation: ", h("a", { href: fed, dataset: { federation: "ui" } }, "open the federation's UI"),
      " for every cluster, the global pools and the federated services.") : "",
    h("p", "This page is served by one cluster stack: its pages show this cluster only."),
    h("p", "The federation's UI lists every cluster, the global pools and the federated services: it is served on the federation's HTTP port (", h("code", "peloton serve federation"),
      ", or the federation port that ", h("code", "peloton up"), " prints in its ready line)."));
}
