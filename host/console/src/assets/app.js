// The console page. Everything a record or the queue says is written as text
// (textContent), never as markup: tool ids, reasons and arguments come from tools,
// servers and models. Nothing here builds HTML from strings.
"use strict";

// The token comes in the URL's fragment, which the browser never sends to a server;
// it is kept for this tab only and taken out of the address bar.
function token() {
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given) {
    sessionStorage.setItem("aegis-token", given);
    history.replaceState(null, "", location.pathname);
  }
  return sessionStorage.getItem("aegis-token") || "";
}

function api(path, options) {
  const o = options || {};
  o.headers = Object.assign({ Authorization: "Bearer " + token() }, o.headers || {});
  return fetch(path, o);
}

// Most rows drawn at once; the rest are counted, and the filters narrow them.
const MOST_ROWS = 500;

const state = {
  files: new Map(), // file number -> {name, verdict, headline, stopped}
  hosts: new Map(), // "file:session" -> hostname
  calls: [], // {n, file, host, row}, in the order they came
  approvals: null, // the last approvals event
};

// Characters a screen draws as nothing or as something else (controls, bidirectional
// overrides, zero-width and format characters, tags, variation selectors, fillers,
// private use, noncharacters) are shown as \u{…} escapes, so a name cannot reorder,
// hide or imitate what is around it. The same set `aegis log` and `aegis verify`
// escape (aegis-record's text.rs).
const UNSAFE = [
  [0x0, 0x1f], [0x7f, 0x9f], [0xad, 0xad], [0x34f, 0x34f], [0x600, 0x605], [0x61c, 0x61c],
  [0x6dd, 0x6dd], [0x70f, 0x70f], [0x890, 0x891], [0x8e2, 0x8e2], [0x115f, 0x1160],
  [0x17b4, 0x17b5], [0x180b, 0x180f], [0x200b, 0x200f], [0x2028, 0x202e], [0x2060, 0x206f],
  [0x3164, 0x3164], [0xe000, 0xf8ff], [0xfdd0, 0xfdef], [0xfe00, 0xfe0f], [0xfeff, 0xfeff],
  [0xffa0, 0xffa0], [0xfff0, 0xfffb], [0x110bd, 0x110bd], [0x110cd, 0x110cd],
  [0x13430, 0x1343f], [0x1bca0, 0x1bca3], [0x1d173, 0x1d17a], [0xe0000, 0xe0fff],
  [0xf0000, 0x10ffff],
];

function hidden(cp) {
  // The last two code points of every plane are noncharacters.
  if ((cp & 0xfffe) === 0xfffe) return true;
  return UNSAFE.some(([from, to]) => cp >= from && cp <= to);
}

function visible(text) {
  let out = "";
  // By code point, so a character past U+FFFF is judged whole.
  for (const c of String(text)) {
    const cp = c.codePointAt(0);
    out += hidden(cp) ? "\\u{" + cp.toString(16).padStart(4, "0") + "}" : c;
  }
  return out;
}

function el(tag, text, className) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = visible(text);
  if (className) e.className = className;
  return e;
}

function setStatus(text) {
  document.getElementById("status").textContent = text;
}

function problem(text) {
  const p = document.getElementById("problem");
  p.textContent = text;
  p.hidden = !text;
}

function apply(events) {
  for (const e of events) {
    if (e.kind === "file") {
      if (e.file === undefined) {
        state.files.set("name:" + e.name, e);
      } else {
        // A file once not there yet, now followed.
        state.files.delete("name:" + e.name);
        state.files.set(e.file, e);
      }
    } else if (e.kind === "session") {
      const host = (e.session.host && e.session.host.hostname) || "";
      state.hosts.set(e.file + ":" + e.session.index, host);
    } else if (e.kind === "call") {
      state.calls.push({ n: e.call, file: e.file, host: e.host || "", row: e.row });
    } else if (e.kind === "approvals") {
      state.approvals = e;
    }
  }
  schedule();
}

let drawing = false;
function schedule() {
  if (drawing) return;
  drawing = true;
  requestAnimationFrame(() => {
    drawing = false;
    draw();
  });
}

// What the queue looked like when last drawn: it is redrawn only when it changes, so
// a card never moves under the operator's pointer because a call arrived.
let approvalsDrawn = null;

function draw() {
  drawFiles();
  drawCalls();
  if (state.approvals !== approvalsDrawn) {
    approvalsDrawn = state.approvals;
    drawApprovals();
  }
}

function drawFiles() {
  const list = document.getElementById("files");
  list.replaceChildren();
  for (const f of state.files.values()) {
    const item = el("li");
    item.appendChild(el("span", f.name + ": "));
    item.appendChild(el("strong", f.verdict, f.verdict));
    item.appendChild(el("span", " — " + f.headline));
    if (f.stopped) item.appendChild(el("span", " (" + f.stopped + ")"));
    list.appendChild(item);
  }
}

function filters() {
  return {
    tool: document.getElementById("f-tool").value.trim(),
    verdict: document.getElementById("f-verdict").value,
    host: document.getElementById("f-host").value.trim(),
    since: normalSince(document.getElementById("f-since").value.trim()),
  };
}

// The record writes times as 2026-12-06T10:00:00.000000Z, which sort as text; a
// shorter time the operator types is widened to that form.
function normalSince(text) {
  if (/^\d{4}-\d{2}-\d{2}$/.test(text)) return text + "T00:00:00.000000Z";
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?)Z?$/.exec(text);
  if (m) return m[1] + (m[2] ? "" : ":00") + ".000000Z";
  return text;
}

function keeps(f, c) {
  const r = c.row;
  return (
    (!f.tool || r.tool_id.includes(f.tool)) &&
    (!f.verdict || r.verdict === f.verdict) &&
    (!f.host || hostOf(c).includes(f.host)) &&
    (!f.since || (r.time !== undefined && r.time >= f.since))
  );
}

function hostOf(c) {
  return c.host || state.hosts.get(c.file + ":" + c.row.session) || "";
}

function cell(tr, label, text) {
  const td = el("td", text);
  td.dataset.label = label;
  tr.appendChild(td);
  return td;
}

function drawCalls() {
  const f = filters();
  const body = document.querySelector("#calls tbody");
  // A call's button that has the keyboard's focus keeps it across the redraw.
  const focused = body.contains(document.activeElement) ? document.activeElement.dataset.call : undefined;
  body.replaceChildren();
  let kept = 0;
  for (let i = state.calls.length - 1; i >= 0; i--) {
    const c = state.calls[i];
    if (!keeps(f, c)) continue;
    kept++;
    if (kept > MOST_ROWS) continue;
    const r = c.row;
    const file = state.files.get(c.file) || {};
    const tr = el("tr", undefined, r.verdict);
    if (file.verdict === "tampered") tr.classList.add("under-tampered");
    cell(tr, "Time", r.time || "-");
    cell(tr, "Host", hostOf(c) || "-");
    cell(tr, "Session", String(r.session));
    const tool = cell(tr, "Tool", "");
    const open = el("button", r.tool_id === "" ? "-" : r.tool_id);
    open.type = "button";
    open.className = "link";
    open.setAttribute("aria-label", "Evidence of the call to " + visible(r.tool_id) + " at " + (r.time || "an unknown time"));
    open.dataset.call = String(c.n);
    open.addEventListener("click", () => evidence(c, open));
    tool.appendChild(open);
    cell(tr, "Verdict", r.verdict);
    cell(tr, "Station", r.station || "-");
    cell(tr, "Reason", r.reason || "-");
    cell(tr, "Duration", r.wall_ms === undefined ? "-" : r.wall_ms + " ms");
    cell(tr, "Record", file.verdict || "-").classList.add(file.verdict || "reading");
    body.appendChild(tr);
    if (focused === String(c.n)) open.focus();
  }
  const all = state.calls.length;
  document.getElementById("shown").textContent =
    kept === all
      ? all + (all === 1 ? " call" : " calls")
      : kept + " of " + all + " calls match" + (kept > MOST_ROWS ? "; the newest " + MOST_ROWS + " are shown" : "");
}

// ---- Evidence ------------------------------------------------------------------

// A JSON value flattened to rows of a definition list: "decision_axes.matched_rule".
function flatten(value, path, rows) {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const keys = Object.keys(value);
    if (keys.length === 0) rows.push([path, "{}"]);
    for (const k of keys) flatten(value[k], path ? path + "." + k : k, rows);
  } else if (Array.isArray(value)) {
    rows.push([path, value.length === 0 ? "(none)" : value.map((v) => (typeof v === "string" ? v : JSON.stringify(v))).join(", ")]);
  } else {
    rows.push([path, typeof value === "string" ? value : JSON.stringify(value)]);
  }
}

function definitions(rows) {
  const dl = el("dl");
  for (const [name, value] of rows) {
    dl.appendChild(el("dt", name));
    dl.appendChild(el("dd", value));
  }
  return dl;
}

const LINE_TITLES = {
  open: "Session opened (provenance and pins)",
  intent: "Intent (written before the call ran)",
  parked: "Parked (what approving authorised)",
  decision: "Decision and approver",
  outcome: "Outcome (verdict, axes, grant, digests)",
  tool_change: "Tool change",
};

// The button that opened the evidence, given the focus back when it is closed.
let opener = null;

async function evidence(c, from) {
  opener = from || null;
  const answer = await api("/api/calls/" + c.n);
  if (!answer.ok) {
    problem("The console refused the evidence: " + (await answer.text()));
    return;
  }
  const e = await answer.json();
  const body = document.getElementById("evidence-body");
  body.replaceChildren();
  body.appendChild(el("p", "From " + e.file + ", under its verdict: " + ((state.files.get(c.file) || {}).verdict || "not yet read")));
  const rowRows = [];
  flatten(e.row, "", rowRows);
  body.appendChild(el("h3", "The call"));
  body.appendChild(definitions(rowRows));
  for (const l of e.lines) {
    body.appendChild(el("h3", LINE_TITLES[l.kind] || l.kind));
    let parsed;
    try {
      parsed = JSON.parse(l.line);
    } catch (_) {
      parsed = { line: l.line };
    }
    const rows = [];
    flatten(parsed, "", rows);
    body.appendChild(definitions(rows));
  }
  const raw = el("details");
  raw.appendChild(el("summary", "Raw lines, as the record holds them"));
  const pre = el("pre");
  for (const l of e.lines) {
    pre.appendChild(el("span", l.line));
    pre.appendChild(document.createTextNode("\n"));
  }
  raw.appendChild(pre);
  body.appendChild(raw);
  body.appendChild(el("h3", "Check it offline"));
  body.appendChild(el("code", e.verify));
  const section = document.getElementById("evidence");
  section.hidden = false;
  section.focus();
}

// ---- Approvals -----------------------------------------------------------------

function scopeRows(scope) {
  const rows = [["tool", scope.tool_id]];
  rows.push(["arguments digest", scope.arguments_digest || "(none: any arguments)"]);
  if (scope.fs) {
    rows.push(["fs read", (scope.fs.read_paths || []).join(", ") || "(none)"]);
    rows.push(["fs write", (scope.fs.write_paths || []).join(", ") || "(none)"]);
  } else {
    rows.push(["fs", "(none)"]);
  }
  const http = (scope.net && scope.net.http) || [];
  if (http.length === 0) rows.push(["net", "(none)"]);
  for (const rule of http) {
    rows.push(["net", rule.host + " ports " + ((rule.ports || []).join(",") || "(any)") + " methods " + ((rule.methods || []).join(", ") || "(none)")]);
  }
  rows.push(["approval expires", scope.expires_at || "(not bounded by the scope)"]);
  return rows;
}

function drawApprovals() {
  const a = state.approvals;
  const section = document.getElementById("approvals");
  if (!a) {
    section.hidden = true;
    return;
  }
  section.hidden = false;
  const note = document.getElementById("approvals-note");
  const list = document.getElementById("requests");
  if (a.error) {
    // No card stays up with buttons on a state that can no longer be read.
    list.replaceChildren();
    note.textContent = visible("The queue at " + a.queue + " could not be read: " + a.error);
    return;
  }
  const pending = a.requests.filter((l) => l.state === "pending").length;
  note.textContent =
    pending + " waiting in " + a.queue + (a.decides ? "" : " (read-only: the console was started without --approver-key)");
  // A form being filled in is kept as it is while the queue is redrawn.
  const typing = list.contains(document.activeElement) ? document.activeElement.id : null;
  const reasons = new Map();
  for (const input of list.querySelectorAll("input[data-approval]")) reasons.set(input.dataset.approval, input.value);
  list.replaceChildren();
  // Oldest park first, as the queue lists them: a new one goes below, never moving
  // a card the operator is about to press.
  for (const l of a.requests) {
    const r = l.request;
    const box = el("article", undefined, "request " + l.state);
    box.setAttribute("aria-label", "Request " + r.approval_id + " to call " + visible(r.tool_id));
    box.appendChild(el("h3", r.tool_id + " — " + l.state));
    const rows = [["approval id", r.approval_id]];
    if (r.tool_id !== r.scope.tool_id) rows.push(["called as", r.tool_id]);
    rows.push(["arguments", r.arguments !== undefined ? r.arguments : r.arguments_cut ? "(over 64 KiB: not shown; the digest binds them)" : "(none)"]);
    for (const row of scopeRows(r.scope)) rows.push(row);
    rows.push(["bound", r.bound ? JSON.stringify(r.bound) : "(none)"]);
    rows.push(["request expires", r.expires_at]);
    rows.push(["parked by", r.front + " on " + r.host + " (pid " + r.pid + ") at " + r.parked_at]);
    rows.push(["rule", r.rule || "(unnamed)"]);
    rows.push(["reason", r.reason || "(none given)"]);
    if (l.decision) {
      const d = l.decision;
      rows.push(["decided", d.decided_at + ": " + d.verdict.verdict + (d.verdict.reason ? " (" + d.verdict.reason + ")" : "")]);
      rows.push(["approver", d.approver.key_id || d.approver.client || d.approver.why || JSON.stringify(d.approver)]);
    }
    box.appendChild(definitions(rows));
    if (l.state === "pending" && a.decides) box.appendChild(decideForm(r, reasons.get(r.approval_id) || ""));
    list.appendChild(box);
  }
  if (typing) {
    const again = document.getElementById(typing);
    if (again) again.focus();
  }
}

function decideForm(r, reason) {
  const id = r.approval_id;
  const what = visible(r.tool_id) + " (" + id + ")";
  const form = el("div", undefined, "decide");
  const approve = el("button", "Approve");
  approve.type = "button";
  approve.id = "approve-" + id;
  approve.setAttribute("aria-label", "Approve the call to " + what);
  approve.addEventListener("click", () => decide(id, { verdict: "approve" }));
  const label = el("label", "Reason to deny");
  const input = el("input");
  input.type = "text";
  input.id = "reason-" + id;
  input.dataset.approval = id;
  input.value = reason;
  input.setAttribute("aria-label", "Reason to deny the call to " + what);
  label.appendChild(input);
  const deny = el("button", "Deny");
  deny.type = "button";
  deny.id = "deny-" + id;
  deny.setAttribute("aria-label", "Deny the call to " + what);
  deny.addEventListener("click", () => {
    const why = input.value.trim();
    if (!why) {
      problem("Say why you deny it: the client is told.");
      input.focus();
      return;
    }
    decide(id, { verdict: "deny", reason: why });
  });
  form.append(approve, label, deny);
  return form;
}

async function decide(id, body) {
  const answer = await api("/api/approvals/" + id, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!answer.ok) {
    problem("The decision was refused: " + (await answer.text()));
    return;
  }
  problem("");
  setStatus((body.verdict === "approve" ? "Approved " : "Denied ") + id + "; the waiting host is woken.");
}

// ---- The event stream --------------------------------------------------------------

function reset() {
  state.files.clear();
  state.hosts.clear();
  state.calls = [];
  state.approvals = null;
}

// Reads /api/events (server-sent events) with fetch, which can send the token as a
// header (EventSource cannot). Each message's data is a JSON array of events.
async function follow() {
  const answer = await api("/api/events");
  if (answer.status === 401 || answer.status === 403) {
    problem("The console refused this page: " + (await answer.text()) + " Open the address the console printed.");
    return false;
  }
  if (!answer.ok || !answer.body) throw new Error("HTTP " + answer.status);
  reset();
  setStatus("Live: calls appear as they are recorded.");
  problem("");
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return true;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const message = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = message
        .split("\n")
        .filter((l) => l.startsWith("data: "))
        .map((l) => l.slice(6))
        .join("\n");
      if (data) apply(JSON.parse(data));
    }
  }
}

async function live() {
  for (;;) {
    let again;
    try {
      again = await follow();
    } catch (e) {
      again = true;
      setStatus("Disconnected (" + e.message + "); trying again…");
    }
    if (!again) return;
    setStatus("Disconnected; trying again…");
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

document.getElementById("filters").addEventListener("input", schedule);
document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
document.getElementById("evidence-close").addEventListener("click", () => {
  document.getElementById("evidence").hidden = true;
  const back = opener && document.querySelector('#calls button[data-call="' + opener.dataset.call + '"]');
  if (back) back.focus();
});
token();
live();
