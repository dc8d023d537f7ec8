// The console page. Everything the record says is written as text (textContent),
// never as markup: tool ids and reasons come from tools, servers and models.
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

function cell(row, label, text) {
  const td = document.createElement("td");
  td.dataset.label = label;
  td.textContent = text;
  row.appendChild(td);
}

function show(listing) {
  document.getElementById("record").textContent = "Record: " + listing.record;
  const verdict = document.getElementById("verdict");
  verdict.textContent = listing.headline;
  verdict.className = listing.verdict;
  const hosts = new Map();
  for (const s of listing.sessions) {
    hosts.set(s.index, (s.host && s.host.hostname) || "-");
  }
  const body = document.querySelector("#calls tbody");
  body.replaceChildren();
  for (const c of listing.calls.slice().reverse()) {
    const row = document.createElement("tr");
    row.className = c.verdict;
    cell(row, "Time", c.time || "-");
    cell(row, "Host", hosts.get(c.session) || "-");
    cell(row, "Session", String(c.session));
    cell(row, "Tool", c.tool_id);
    cell(row, "Verdict", c.verdict);
    cell(row, "Station", c.station || "-");
    cell(row, "Reason", c.reason || "-");
    cell(row, "Duration", c.wall_ms === undefined ? "-" : c.wall_ms + " ms");
    body.appendChild(row);
  }
}

function problem(text) {
  const p = document.getElementById("problem");
  p.textContent = text;
  p.hidden = false;
}

async function load() {
  const answer = await fetch("/api/calls", {
    headers: { Authorization: "Bearer " + token() },
  });
  if (!answer.ok) {
    problem("The console refused: " + (await answer.text()));
    return;
  }
  show(await answer.json());
}

load().catch((e) => problem("The console could not be reached: " + e));
