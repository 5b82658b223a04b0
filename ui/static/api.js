// api.js: the REST API of the daemon that serves this page (same origin),
// and the error every failed call throws, with the server's own message.

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

// call sends one request and returns the decoded JSON answer.
export async function call(method, path, body, signal) {
  const init = { method, headers: { "Accept": "application/json" }, signal };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, 14, "the server did not answer: " + e.message);
  }
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!resp.ok) {
    const msg = (data && data.message) || text.trim() || resp.statusText || "HTTP " + resp.status;
    throw new ApiError(resp.status, data && data.code, msg);
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
