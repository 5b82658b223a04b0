// grid.js: a job's instances as a grid of coloured cells on a canvas.
// Only the rows in view are drawn, so 100,000 instances cost what one
// screenful does; a tall spacer behind a sticky canvas gives the scroll
// bar its true length. Arrow keys move the selection, Enter opens it.
import { h } from "./dom.js";

// taskStates are the TaskState names in their enum order; a cell's state
// is its index here.
export const taskStates = ["TASK_STATE_UNSPECIFIED", "INITIALIZED", "PENDING", "READY", "PLACING", "PLACED",
  "LAUNCHING", "LAUNCHED", "STARTING", "RUNNING", "SUCCEEDED", "FAILED", "LOST", "KILLED", "PREEMPTING", "KILLING", "PREEMPTED"];
const stateIndex = Object.fromEntries(taskStates.map((s, i) => [s, i]));

// colourVar names the CSS variable that colours each state.
function colourVar(s) {
  if (s === "RUNNING") return "--c-running";
  if (s === "SUCCEEDED") return "--c-succeeded";
  if (s === "FAILED" || s === "LOST") return "--c-failed";
  if (s === "KILLED" || s === "KILLING" || s === "PREEMPTING" || s === "PREEMPTED") return "--c-killed";
  if (s === "PENDING" || s === "INITIALIZED" || s === "READY") return "--c-pending";
  if (s === "TASK_STATE_UNSPECIFIED") return "--c-none";
  return "--c-starting";
}

const CELL = 14; // px per cell, gap included
const GAP = 2;

export class InstanceGrid {
  constructor({ onSelect, onOpen, height = 320 }) {
    this.onSelect = onSelect;
    this.onOpen = onOpen;
    this.states = new Uint8Array(0);
    this.ids = null; // instance ids by cell, when not 0..n-1
    this.selected = -1;
    this.maxHeight = height;
    this.canvas = h("canvas.gridcanvas", { "aria-hidden": "true" });
    this.spacer = h("div.gridspacer");
    this.el = h("div.grid", {
      tabindex: 0, role: "grid", "aria-label": "Instances, coloured by state; arrow keys move, Enter opens",
      style: { height: height + "px" },
    }, this.canvas, this.spacer);
    this.el.addEventListener("scroll", () => this.schedule(), { passive: true });
    this.canvas.addEventListener("mousemove", (ev) => {
      const i = this.cellAt(ev);
      this.canvas.title = i >= 0 ? this.describe(i) : "";
    });
    this.canvas.addEventListener("click", (ev) => {
      const i = this.cellAt(ev);
      if (i >= 0) this.select(i, true);
    });
    this.canvas.addEventListener("dblclick", (ev) => {
      const i = this.cellAt(ev);
      if (i >= 0 && this.onOpen) this.onOpen(this.idOf(i));
    });
    this.el.addEventListener("keydown", (ev) => this.key(ev));
    this.resizeObs = new ResizeObserver(() => this.layout());
    this.resizeObs.observe(this.el);
    this.colours = null;
  }

  idOf(i) { return this.ids ? this.ids[i] : i; }
  // cellOf is the cell of instance id: ids has holes once a scale removed
  // chosen instances (the last cell when id is not shown).
  cellOf(id) {
    const c = this.ids ? this.ids.indexOf(id) : id;
    return c < 0 || c >= this.states.length ? this.states.length - 1 : c;
  }
  describe(i) { return `instance ${this.idOf(i)}: ${taskStates[this.states[i]]}`; }

  // set takes the tasks of a ListTasks answer; total, if larger, is how
  // many instances the job has (cells not yet read are drawn blank).
  set(tasks, total = 0) {
    const n = Math.max(tasks.length, total);
    if (this.states.length !== n) this.states = new Uint8Array(n);
    let dense = true;
    if (tasks.length < n) this.states.fill(0, tasks.length);
    for (let i = 0; i < tasks.length; i++) {
      const t = tasks[i];
      this.states[i] = stateIndex[t.status ? t.status.state : ""] || 0;
      if (t.instanceId !== i) dense = false;
    }
    this.filled = tasks.length > 0;
    if (tasks.length >= n && n > 0 && !performance.getEntriesByName("peloton:grid-all").length) performance.mark("peloton:grid-all");
    this.ids = dense ? null : tasks.map((t) => t.instanceId);
    if (this.ids) for (let i = tasks.length; i < n; i++) this.ids.push(-1);
    this.layout();
  }

  layout() {
    const w = this.el.clientWidth;
    if (!w) return;
    this.cols = Math.max(1, Math.floor((w - GAP) / CELL));
    this.rows = Math.ceil(this.states.length / this.cols);
    // A small job's grid is as tall as its rows, a large one's scrolls.
    const want = Math.min(this.maxHeight, Math.max(CELL * 2, this.rows * CELL + GAP * 2)) + "px";
    if (this.el.style.height !== want) this.el.style.height = want;
    const viewH = this.el.clientHeight;
    const dpr = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(w * dpr) || this.canvas.height !== Math.round(viewH * dpr)) {
      this.canvas.width = Math.round(w * dpr);
      this.canvas.height = Math.round(viewH * dpr);
      this.canvas.style.width = w + "px";
      this.canvas.style.height = viewH + "px";
    }
    this.spacer.style.height = Math.max(0, this.rows * CELL + GAP - viewH) + "px";
    this.draw();
  }

  schedule() {
    if (this.pending) return;
    this.pending = requestAnimationFrame(() => { this.pending = 0; this.draw(); });
  }

  readColours() {
    const cs = getComputedStyle(this.el);
    this.colours = taskStates.map((s) => cs.getPropertyValue(colourVar(s)).trim() || "#888");
    this.bg = cs.getPropertyValue("--bg-raised").trim() || "#fff";
    this.fg = cs.getPropertyValue("--fg").trim() || "#000";
  }

  draw() {
    if (!this.colours) this.readColours();
    const ctx = this.canvas.getContext("2d");
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const viewH = this.el.clientHeight;
    const top = this.el.scrollTop;
    ctx.fillStyle = this.bg;
    ctx.fillRect(0, 0, this.canvas.width, this.canvas.height);
    const first = Math.floor(top / CELL);
    const last = Math.min(this.rows - 1, Math.ceil((top + viewH) / CELL));
    const n = this.states.length;
    const size = CELL - GAP;
    // Cells of one colour are drawn together: one fillStyle change per
    // state instead of per cell.
    for (let s = 0; s < taskStates.length; s++) {
      ctx.fillStyle = this.colours[s];
      for (let r = first; r <= last; r++) {
        const y = r * CELL + GAP - top;
        const base = r * this.cols;
        const end = Math.min(n, base + this.cols);
        for (let i = base; i < end; i++) {
          if (this.states[i] === s) ctx.fillRect((i - base) * CELL + GAP, y, size, size);
        }
      }
    }
    if (this.filled && !performance.getEntriesByName("peloton:grid").length) {
      // The first draw with instances: what the benchmark calls first render.
      performance.mark("peloton:grid");
    }
    if (this.selected >= 0) {
      const r = Math.floor(this.selected / this.cols);
      const c = this.selected % this.cols;
      ctx.strokeStyle = this.fg;
      ctx.lineWidth = 2;
      ctx.strokeRect(c * CELL + GAP - 1, r * CELL + GAP - top - 1, size + 2, size + 2);
    }
  }

  cellAt(ev) {
    const rect = this.canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left;
    const y = ev.clientY - rect.top + this.el.scrollTop;
    const c = Math.floor(x / CELL);
    const r = Math.floor(y / CELL);
    if (c >= this.cols) return -1;
    const i = r * this.cols + c;
    return i >= 0 && i < this.states.length ? i : -1;
  }

  select(i, notify) {
    this.selected = i;
    const r = Math.floor(i / this.cols);
    const y = r * CELL;
    if (y < this.el.scrollTop) this.el.scrollTop = y;
    else if (y + CELL > this.el.scrollTop + this.el.clientHeight) this.el.scrollTop = y + CELL - this.el.clientHeight;
    this.draw();
    this.el.setAttribute("aria-label", this.describe(i));
    if (notify && this.onSelect) this.onSelect(this.idOf(i));
  }

  key(ev) {
    const n = this.states.length;
    if (!n) return;
    let i = this.selected < 0 ? 0 : this.selected;
    const step = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: this.cols, ArrowUp: -this.cols,
      PageDown: this.cols * 10, PageUp: -this.cols * 10 }[ev.key];
    if (step !== undefined) {
      i = Math.max(0, Math.min(n - 1, i + step));
      ev.preventDefault();
      this.select(i, true);
    } else if (ev.key === "Home") { ev.preventDefault(); this.select(0, true); }
    else if (ev.key === "End") { ev.preventDefault(); this.select(n - 1, true); }
    else if (ev.key === "Enter" && this.selected >= 0 && this.onOpen) { ev.preventDefault(); this.onOpen(this.idOf(this.selected)); }
  }

  dispose() { this.resizeObs.disconnect(); }
}

// legend counts states and shows their colours.
export function legend(tasks) {
  const counts = {};
  for (const t of tasks) {
    const s = t.status ? t.status.state : "TASK_STATE_UNSPECIFIED";
    counts[s] = (counts[s] || 0) + 1;
  }
  return h("div.legend", Object.entries(counts).sort((a, b) => b[1] - a[1]).map(([s, n]) =>
    h("span.legenditem", h("span.swatch", { style: { background: `var(${colourVar(s)})` } }), `${s} ${n}`)));
}
