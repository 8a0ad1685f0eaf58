// memtape memory browser: the page's entry point. Routing (the URL hash), the API-key login,
// the agent and user pickers, sessions and their paged timelines, and search.
import * as api from "./api.js";
import { h, fill, when, rfc3339, contentText, pretty } from "./render.js";
import { showMemory } from "./memory.js";

const $ = (id) => document.getElementById(id);
const PAGE = 100;

// ---- status line -------------------------------------------------------------------------

let statusTimer = 0;
/** Shows `text` in the status line (errors stay until the next message). */
export function say(text, error = false) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("error", error);
  clearTimeout(statusTimer);
  if (!error && text) statusTimer = setTimeout(() => (s.textContent = ""), 6000);
}

/** Shows an API error, unless it is the 401 the login form already answers. */
export function fail(e) {
  if (e && e.status === 401) return;
  say(e && e.message ? e.message : String(e), true);
  console.error(e);
}

// ---- routing -----------------------------------------------------------------------------

/** The route in the hash: `#/VIEW?agent=…&user=…&…`. */
function route() {
  const m = location.hash.match(/^#\/([a-z]*)\??(.*)$/);
  const view = m && ["sessions", "memory", "search"].includes(m[1]) ? m[1] : "sessions";
  return { view, p: new URLSearchParams(m ? m[2] : "") };
}

/** A link target: `view` with `params`, keeping the agent and user picked. */
export function href(view, params = {}) {
  const q = new URLSearchParams();
  const cur = route().p;
  for (const k of ["agent", "user"]) if (cur.get(k)) q.set(k, cur.get(k));
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "") q.delete(k);
    else q.set(k, String(v));
  }
  const s = q.toString();
  return `#/${view}${s ? `?${s}` : ""}`;
}

export function go(view, params) {
  location.hash = href(view, params);
}

/** The agent and user picked (the scope of memory and of the session list). */
export function scope() {
  const p = route().p;
  return { agent: p.get("agent") || "default", user: p.get("user") || "" };
}

let routing = Promise.resolve();
function render() {
  routing = routing.then(renderNow, renderNow);
}

async function renderNow() {
  if (!$("login").hidden) return;
  const { view, p } = route();
  for (const v of ["sessions", "memory", "search"]) {
    $(`view-${v}`).hidden = v !== view;
    const nav = $(`nav-${v}`);
    nav.href = href(v);
    if (v === view) nav.setAttribute("aria-current", "page");
    else nav.removeAttribute("aria-current");
  }
  try {
    await pickers();
    if (view === "sessions") await sessionsView(p);
    else if (view === "memory") await showMemory($("view-memory"), p, scope());
    else await searchView(p);
  } catch (e) {
    fail(e);
  }
}

// ---- login -------------------------------------------------------------------------------

function showLogin(message) {
  $("login").hidden = false;
  for (const v of ["sessions", "memory", "search"]) $(`view-${v}`).hidden = true;
  $("login-error").textContent = message || "";
  $("logout").hidden = true;
  $("key").focus();
}

api.whenUnauthorized((e) => showLogin(api.key.get() ? e.message : ""));

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  api.key.set($("key").value.trim());
  try {
    await api.get("/v1/sessions", { agent: scope().agent });
  } catch (e) {
    if (e.status !== 401) $("login-error").textContent = e.message;
    return;
  }
  $("key").value = "";
  $("login").hidden = true;
  $("logout").hidden = false;
  agentsLoaded = null;
  render();
});

$("logout").addEventListener("click", () => {
  api.key.clear();
  location.reload();
});

// ---- agent and user pickers ----------------------------------------------------------------

let agentsLoaded = null; // the `/v1/agents` answer, or [] when the server has no such route

async function pickers() {
  const { agent, user } = scope();
  if (agentsLoaded === null) {
    try {
      agentsLoaded = (await api.get("/v1/agents")).agents || [];
    } catch (e) {
      if (e.status === 401) throw e;
      agentsLoaded = [];
    }
  }
  const agents = agentsLoaded.map((a) => a.agent);
  if (!agents.includes(agent)) agents.push(agent);
  const known = agentsLoaded.find((a) => a.agent === agent);
  const users = known ? [...known.users] : [];
  if (!known) {
    // No agent list: the users are those of the agent's sessions.
    try {
      const s = await api.get("/v1/sessions", { agent });
      for (const x of s.sessions) if (x.user && !users.includes(x.user)) users.push(x.user);
    } catch (e) {
      if (e.status === 401) throw e;
    }
  }
  if (user && !users.includes(user)) users.push(user);
  fill($("agent"), agents.map((a) => h("option", { value: a, selected: a === agent }, a)));
  fill(
    $("user"),
    h("option", { value: "" }, "(agent)"),
    users.map((u) => h("option", { value: u, selected: u === user }, u)),
  );
  $("agent").value = agent;
  $("user").value = user;
  $("logout").hidden = !api.key.get();
}

$("agent").addEventListener("change", () => go(route().view, { agent: $("agent").value, user: "" }));
$("user").addEventListener("change", () => go(route().view, { user: $("user").value }));

// ---- sessions and the timeline --------------------------------------------------------------

let sessionList = [];

async function sessionsView(p) {
  const { agent, user } = scope();
  // Read again on every visit: new sessions and counts show without a reload.
  sessionList = (await api.get("/v1/sessions", { agent, user })).sessions;
  const chosen = p.get("session");
  const su = p.get("su") || "";
  fill(
    $("session-list"),
    sessionList.length
      ? [...sessionList].reverse().map((s) =>
          h(
            "li",
            {},
            h(
              "a",
              {
                href: href("sessions", { session: s.session, su: s.user || "", entry: "" }),
                "aria-current": s.session === chosen && (s.user || "") === su ? "true" : null,
              },
              h("strong", {}, s.session),
              s.user ? h("span", { class: "tag" }, s.user) : null,
              h("small", {}, `${s.messages} messages · ${s.entries} entries · ${when(s.updated_at)}`),
            ),
          ),
        )
      : h("li", { class: "muted" }, "No sessions yet."),
  );
  if (chosen) await timeline(chosen, su, Number(p.get("entry")) || 0);
  else {
    tl.key = "";
    fill($("entries"));
    $("timeline-title").textContent = "Timeline";
    $("timeline-info").textContent = sessionList.length ? "Pick a session." : "";
    $("more").hidden = $("earlier").hidden = true;
  }
}

/** The timeline shown: its session, the entries loaded (in tape order) and the cursors. */
const tl = { key: "", entries: [], byId: new Map(), els: new Map(), next: null, done: false, loading: false, start: true };

const CONVERSATION = new Set(["message", "tool_call", "tool_result", "system"]);

async function timeline(session, su, entry) {
  const { agent } = scope();
  const key = `${agent}\u0000${su}\u0000${session}`;
  const info = sessionList.find((s) => s.session === session && (s.user || "") === su);
  if (key !== tl.key || (entry && !tl.byId.has(entry))) {
    Object.assign(tl, {
      key, session, su, agent, info, entries: [], byId: new Map(), els: new Map(),
      next: entry ? entry - 1 : null, done: false, loading: false, start: !entry,
      last: info ? info.last_consolidated : 0,
    });
    fill($("entries"));
    $("timeline-title").textContent = `Session ${session}${su ? ` (${su})` : ""}`;
    $("timeline-info").textContent = info
      ? `${info.entries} entries, ${info.messages} messages; consolidated through #${info.last_consolidated}.`
      : "";
    await page();
  }
  $("earlier").hidden = tl.start;
  if (entry) highlight(entry);
}

/** Loads the next page of the timeline (the page never holds a whole tape at once). */
async function page() {
  if (tl.loading) return;
  tl.loading = true;
  const key = tl.key;
  $("more").disabled = true;
  try {
    const r = await api.get(`/v1/sessions/${encodeURIComponent(tl.session)}/entries`, {
      agent: tl.agent, user: tl.su, after: tl.next ?? undefined, limit: PAGE,
    });
    if (key !== tl.key) return;
    const fresh = r.entries.filter((e) => !tl.byId.has(e.id));
    for (const e of fresh) {
      tl.entries.push(e);
      tl.byId.set(e.id, e);
    }
    if (r.entries.length) tl.next = r.entries[r.entries.length - 1].id;
    tl.done = r.next === undefined || r.next === null;
    const ol = $("entries");
    for (const e of fresh) ol.append(...entryItems(e, tl.entries[tl.entries.indexOf(e) - 1]));
    if (tl.done && tl.last && !ol.querySelector(".marker") && tl.entries.length &&
        tl.entries[tl.entries.length - 1].id <= tl.last) ol.append(marker());
    branches();
  } finally {
    tl.loading = false;
    const more = $("more");
    more.disabled = false;
    more.hidden = !tl.key;
    more.textContent = tl.done ? "Check for newer entries" : "Load more";
  }
}

/** Loads the entries just before the first one shown (after a jump into the middle). */
async function earlier() {
  const first = tl.entries[0];
  if (!first || tl.loading) return;
  tl.loading = true;
  const key = tl.key;
  try {
    const r = await api.get(`/v1/sessions/${encodeURIComponent(tl.session)}/entries`, {
      agent: tl.agent, user: tl.su, before: first.id, limit: PAGE,
    });
    const found = r.entries.filter((e) => e.id < first.id && !tl.byId.has(e.id));
    if (r.prev === undefined || r.prev === null) tl.start = true;
    if (key !== tl.key) return;
    const ol = $("entries");
    const firstEl = ol.firstChild;
    const items = [];
    found.forEach((e, i) => {
      tl.byId.set(e.id, e);
      items.push(...entryItems(e, found[i - 1]));
    });
    tl.entries.unshift(...found);
    const top = firstEl.getBoundingClientRect().top;
    ol.prepend(...items);
    window.scrollBy(0, firstEl.getBoundingClientRect().top - top);
    branches();
  } catch (e) {
    fail(e);
  } finally {
    tl.loading = false;
    $("earlier").hidden = tl.start;
  }
}

function marker() {
  return h(
    "li",
    { class: "marker", role: "separator" },
    `consolidated through #${tl.last}: the entries above have left the history`,
  );
}

/** The list items of entry `e` (the consolidation marker before it when it falls there). */
function entryItems(e, prev) {
  const items = [];
  if (tl.last && prev && prev.id <= tl.last && e.id > tl.last) items.push(marker());
  items.push(entryItem(e));
  return items;
}

function entryItem(e) {
  const p = e.payload || {};
  const role = p.role || "";
  const label = e.kind === "message" ? role : e.kind === "event" || e.kind === "anchor" ? `${e.kind} ${p.name || ""}` : e.kind;
  const slot = h("span", { class: "branch" });
  const alts = h("div", { class: "alts" });
  const li = h(
    "li",
    { id: `e-${e.id}`, class: `entry k-${e.kind}${role ? ` r-${role}` : ""}`, tabindex: "-1", dataset: { id: e.id } },
    h(
      "div",
      { class: "meta" },
      h("a", { href: href("sessions", { session: tl.session, su: tl.su, entry: e.id }), title: "Link to this entry" }, `#${e.id}`),
      h("span", { class: "kind" }, label),
      h("time", { datetime: e.created_at }, when(e.created_at)),
      erasedBadge(e),
      slot,
    ),
    entryBody(e),
    alts,
  );
  tl.els.set(e.id, { li, slot, alts });
  return li;
}

/** "erased by #N" (a tombstone) or "redacted by #N" (a piece of text erased), linking the
 * erasure's receipt; nothing for an entry no erasure changed. */
export function erasedBadge(e) {
  if (!e.erased) return null;
  const what = e.erased.how === "whole" ? "erased" : "redacted";
  return h("span", { class: "erased", title: `An erasure (receipt #${e.erased.by}) took ${e.erased.how === "whole" ? "this entry's content" : "a piece of its text"}` }, `${what} by #${e.erased.by}`);
}

function long(text, title) {
  return text.length > 400 || text.split("\n").length > 8
    ? h("details", {}, h("summary", {}, `${title} (${text.length} characters)`), h("pre", {}, text))
    : h("pre", {}, text);
}

function entryBody(e) {
  const p = e.payload || {};
  const meta = e.meta && Object.keys(e.meta).length ? h("details", { class: "json" }, h("summary", {}, "meta"), h("pre", {}, pretty(e.meta))) : null;
  if (e.kind === "anchor") {
    return h("div", { class: "body" }, p.state && Object.keys(p.state).length ? long(pretty(p.state), "state") : null, meta);
  }
  if (e.kind === "event") {
    const d = p.data;
    let text = null;
    if (p.name === "session.consolidated" && d) text = `The consolidation pointer moved to #${d.through}.`;
    else if (p.name === "context.compaction" && d && d.summary) text = d.summary;
    return h(
      "div",
      { class: "body" },
      text ? h("p", {}, text) : null,
      d !== undefined && d !== null ? h("details", { class: "json" }, h("summary", {}, "data"), h("pre", {}, pretty(d))) : null,
      meta,
    );
  }
  if (e.erased && e.erased.how === "whole") {
    return h("div", { class: "body" }, h("p", { class: "muted" }, "[erased]"));
  }
  const text = contentText(p.content);
  const calls = (p.tool_calls || []).map((c) =>
    h("div", { class: "call" }, h("code", {}, (c.function && c.function.name) || "?"), long(pretty((c.function && c.function.arguments) || ""), "arguments")),
  );
  return h(
    "div",
    { class: "body" },
    e.kind === "tool_result" ? h("p", { class: "muted" }, `result of ${p.name || ""} ${p.tool_call_id || ""}`) : null,
    e.kind === "tool_result" || e.kind === "system" ? long(text, e.kind === "system" ? "system prompt" : "result") : text ? h("div", { class: "text" }, text) : null,
    p.reasoning_content ? h("details", {}, h("summary", {}, "reasoning"), h("pre", {}, p.reasoning_content)) : null,
    calls,
    meta,
  );
}

/** Marks regenerated answers: the message answered several times lists its branches, each
 * branch says which it is, and entries off the current thread are dimmed. */
function branches() {
  const kids = new Map();
  let head = null;
  for (const e of tl.entries) {
    if (!CONVERSATION.has(e.kind)) continue;
    head = e;
    if (e.parent === undefined || e.parent === null) continue;
    if (!kids.has(e.parent)) kids.set(e.parent, []);
    kids.get(e.parent).push(e);
  }
  // The current thread: back from the newest conversational entry, as far as loaded.
  const thread = new Set();
  let reached = Infinity;
  for (let x = head; x; x = tl.byId.get(x.parent)) {
    thread.add(x.id);
    reached = x.id;
  }
  for (const e of tl.entries) {
    const el = tl.els.get(e.id);
    if (!el) continue;
    el.slot.replaceChildren();
    el.alts.replaceChildren();
    el.li.classList.toggle("off", CONVERSATION.has(e.kind) && !thread.has(e.id) && e.id > reached);
  }
  for (const [parent, list] of kids) {
    if (list.length < 2) continue;
    const current = list.find((k) => thread.has(k.id)) || list[list.length - 1];
    list.forEach((k, i) => {
      const el = tl.els.get(k.id);
      if (el) {
        el.slot.append(
          h("span", { class: k === current ? "tag cur" : "tag" }, `branch ${i + 1} of ${list.length}${k === current ? " · current" : ""}`),
        );
      }
    });
    const pel = tl.els.get(parent);
    if (pel) {
      pel.alts.append(
        h("span", {}, `${list.length} branches:`),
        ...list.map((k) =>
          h(
            "button",
            { type: "button", class: k === current ? "link cur" : "link", onclick: () => highlight(k.id) },
            `#${k.id}${k === current ? " (current)" : ""}: ${contentText((k.payload || {}).content).slice(0, 60)}`,
          ),
        ),
      );
    }
  }
}

function highlight(id) {
  for (const x of document.querySelectorAll(".entry.hl")) x.classList.remove("hl");
  const el = tl.els.get(id);
  if (!el) return;
  el.li.classList.add("hl");
  el.li.scrollIntoView({ block: "center" });
  el.li.focus({ preventScroll: true });
}

$("more").addEventListener("click", () => page().catch(fail));
$("earlier").addEventListener("click", () => earlier());
// Infinite scroll: the next page loads when "Load more" comes into view.
new IntersectionObserver((seen) => {
  if (seen.some((s) => s.isIntersecting) && tl.key && !tl.done && !tl.loading) page().catch(fail);
}).observe($("more"));

// ---- search ------------------------------------------------------------------------------

const FILTERS = ["q", "mode", "scope", "session", "kind", "role", "since", "until", "as_of", "limit"];

async function searchView(p) {
  const form = $("search-form");
  for (const k of FILTERS) {
    const v = p.get(k);
    if (v === null) continue;
    form.elements[k].value = (k === "since" || k === "until") ? local(v) : v;
  }
  if (!p.get("q")) return;
  const { agent, user } = scope();
  const query = { agent, user };
  for (const k of FILTERS) query[k] = p.get(k) || "";
  const r = await api.get("/v1/search", query);
  fill(
    $("hits"),
    r.hits.length ? r.hits.map(hit) : h("li", { class: "muted" }, "Nothing found."),
  );
  say(`${r.hits.length} hit${r.hits.length === 1 ? "" : "s"}`);
}

function local(t) {
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return "";
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function hit(x) {
  const e = x.entry;
  const p = e.payload || {};
  let text = contentText(p.content);
  if (!text && p.tool_calls) text = p.tool_calls.map((c) => `${c.function.name}(${c.function.arguments})`).join("\n");
  if (!text && p.name) text = `${p.name} ${p.data !== undefined ? JSON.stringify(p.data) : ""}`;
  const where = e.session
    ? h("a", { href: href("sessions", { session: e.session, su: e.user || "", entry: e.id }) }, `#${e.id} in ${e.session}${e.user ? ` (${e.user})` : ""}`)
    : p.name === "memory.change"
      ? h("a", { href: href("memory", {}) }, `#${e.id} memory change`)
      : h("span", {}, `#${e.id}`);
  return h(
    "li",
    { class: "hit" },
    h("div", { class: "meta" }, where, h("span", { class: "kind" }, p.role || e.kind), h("time", { datetime: e.created_at }, when(e.created_at)), h("small", {}, `score ${x.score.toFixed(3)}`)),
    h("div", { class: "text" }, text.length > 600 ? `${text.slice(0, 600)}…` : text),
  );
}

$("search-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = ev.target.elements;
  const params = {};
  for (const k of FILTERS) {
    const v = f[k].value.trim();
    params[k] = k === "since" || k === "until" ? rfc3339(v) : v;
  }
  const next = href("search", params);
  if (location.hash === next) render();
  else location.hash = next;
});

// ---- start -------------------------------------------------------------------------------

window.addEventListener("hashchange", render);
render();
