// memtape memory browser: the memory view. Files rendered as markdown, a time slider over a
// file's versions, diffs, blame (each line's version and the conversation entry behind it),
// and corrections: edit (compare-and-append, conflicts shown), undo, forget, restore.
import * as api from "./api.js";
import { h, fill, markdown, parseDiff, diffView, when } from "./render.js";
import { say, fail, href, go } from "./app.js";

const MODES = [
  ["read", "Read"],
  ["blame", "Blame"],
  ["compare", "Compare"],
  ["edit", "Edit"],
  ["history", "History"],
];

/** What the view shows: the scope, the file, its versions and the one picked. */
const m = { key: "", path: "", versions: [], at: -1, mode: "read", files: {}, version: 0 };
let root = null;
let slideTimer = 0;

/** Shows the memory of `sc` (agent and user) in `el`, the file and mode of `p`. */
export async function showMemory(el, p, sc) {
  root = el;
  const key = `${sc.agent}\u0000${sc.user}`;
  const path = p.get("path") || "";
  const mode = MODES.some(([k]) => k === p.get("mode")) ? p.get("mode") : "read";
  if (key !== m.key || !root.firstChild) {
    Object.assign(m, { key, scope: { agent: sc.agent, user: sc.user }, path: "", versions: [], at: -1 });
    fill(
      root,
      h(
        "aside",
        { class: "side", "aria-labelledby": "files-title" },
        h("h2", { id: "files-title" }, "Files"),
        h("ul", { id: "file-list", class: "list" }),
        h("section", { id: "dropped", "aria-labelledby": "dropped-title" }),
      ),
      h("section", { id: "file", class: "pane", "aria-live": "off" }),
    );
    await files();
    dropped().catch(fail);
  }
  const chosen = path || (m.files["MEMORY.md"] ? "MEMORY.md" : Object.keys(m.files)[0] || "");
  const v = Number(p.get("v")) || 0;
  markCurrent(chosen);
  if (!chosen) {
    fill(document.getElementById("file"), h("p", { class: "muted" }, "This memory has no files yet."));
    return;
  }
  if (chosen !== m.path) await open(chosen);
  m.mode = mode;
  const i = v ? m.versions.findIndex((x) => x.version === v) : -1;
  m.at = i >= 0 ? i : m.versions.length - 1;
  await show();
}

const q = (extra = {}) => ({ agent: m.scope.agent, user: m.scope.user, ...extra });

async function files() {
  const r = await api.get("/v1/memory", q());
  m.files = r.files;
  m.version = r.version;
  const paths = Object.keys(r.files).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  fill(
    document.getElementById("file-list"),
    paths.length
      ? paths.map((path) =>
          h("li", {}, h("a", { href: href("memory", { path }), dataset: { path } }, path, h("small", {}, `v${r.files[path].version} · ${when(r.files[path].updated_at)}`))),
        )
      : h("li", { class: "muted" }, "No files."),
  );
}

const rank = (p) => (p === "MEMORY.md" ? 0 : p === "PROFILE.md" ? 1 : p.startsWith("memory/") ? 3 : 2);

function markCurrent(path) {
  for (const a of document.querySelectorAll("#file-list a")) {
    if (a.dataset.path === path) a.setAttribute("aria-current", "true");
    else a.removeAttribute("aria-current");
  }
}

/** Opens `path`: its versions, the slider at the newest. */
async function open(path) {
  m.path = path;
  m.versions = (await api.get("/v1/memory/versions", q({ path, ops: false }))).versions;
  m.at = m.versions.length - 1;
}

/** The `as_of` of the version picked: the entry that recorded it. */
const asOf = () => (m.at >= 0 && m.at < m.versions.length - 1 ? m.versions[m.at].id : undefined);

async function show() {
  const box = document.getElementById("file");
  const n = m.versions.length;
  const cur = m.versions[m.at];
  const slider = n
    ? h("input", {
        id: "slider", type: "range", min: "0", max: String(Math.max(0, n - 1)), step: "1", value: String(m.at),
        "aria-valuetext": cur ? `version ${cur.version}, ${when(cur.at)}` : "",
        oninput: (ev) => slide(Number(ev.target.value)),
      })
    : null;
  fill(
    box,
    h("h2", {}, m.path),
    n
      ? h(
          "div",
          { class: "slider" },
          h("label", { for: "slider" }, "Version"),
          h("button", { type: "button", "aria-label": "Older version", disabled: m.at <= 0, onclick: () => slide(m.at - 1, true) }, "◀"),
          slider,
          h("button", { type: "button", "aria-label": "Newer version", disabled: m.at >= n - 1, onclick: () => slide(m.at + 1, true) }, "▶"),
          h("output", { id: "version-label", for: "slider" }, label()),
        )
      : h("p", { class: "muted" }, "No versions of this file in this scope's own memory (it may be the agent's, shared)."),
    h(
      "div",
      { class: "modes", role: "group", "aria-label": "What to show" },
      MODES.map(([k, name]) =>
        h("a", { href: href("memory", { path: m.path, mode: k === "read" ? "" : k, v: asOf() ? cur.version : "" }), "aria-current": k === m.mode ? "true" : null, class: "button" }, name),
      ),
    ),
    h("div", { id: "mode-pane" }),
  );
  await pane();
}

function label() {
  const v = m.versions[m.at];
  if (!v) return "";
  const newest = m.at === m.versions.length - 1;
  return `v${v.version} (${m.at + 1} of ${m.versions.length}${newest ? ", newest" : ""}) · ${when(v.at)} · ${v.source}`;
}

/** Moves the slider to version index `i` (`now`: without waiting for more movement). */
function slide(i, now = false) {
  i = Math.max(0, Math.min(m.versions.length - 1, i));
  m.at = i;
  const s = document.getElementById("slider");
  if (s) {
    s.value = String(i);
    s.setAttribute("aria-valuetext", `version ${m.versions[i].version}, ${when(m.versions[i].at)}`);
  }
  const out = document.getElementById("version-label");
  if (out) out.textContent = label();
  const box = document.getElementById("file");
  const [older, newer] = box.querySelectorAll(".slider button");
  if (older) older.disabled = i <= 0;
  if (newer) newer.disabled = i >= m.versions.length - 1;
  // The link keeps the version (without a new history entry for every step).
  history.replaceState(null, "", href("memory", { path: m.path, mode: m.mode === "read" ? "" : m.mode, v: asOf() ? m.versions[i].version : "" }));
  for (const a of box.querySelectorAll(".modes a")) {
    const u = new URL(a.href);
    const params = new URLSearchParams(u.hash.split("?")[1] || "");
    if (asOf()) params.set("v", m.versions[i].version);
    else params.delete("v");
    a.href = `#/memory?${params}`;
  }
  clearTimeout(slideTimer);
  slideTimer = setTimeout(() => pane().catch(fail), now ? 0 : 150);
}

/** The file as of the version picked (its content and the scope's memory version then). */
async function fileAt(at) {
  return api.get("/v1/memory/file", q({ path: m.path, as_of: at }));
}

async function pane() {
  const p = document.getElementById("mode-pane");
  const want = `${m.mode}\u0000${m.at}\u0000${m.path}`;
  p.dataset.want = want;
  const done = (...children) => {
    if (p.dataset.want === want) fill(p, ...children);
  };
  try {
    if (m.mode === "read") {
      const f = await fileOrGone(asOf());
      done(f ? h("article", { class: "md", "aria-label": `${m.path} rendered` }) : h("p", { class: "muted" }, "The file did not exist at this version."));
      if (f && p.dataset.want === want) p.firstChild.innerHTML = markdown(f.content);
    } else if (m.mode === "blame") done(...(await blame()));
    else if (m.mode === "compare") done(...compare());
    else if (m.mode === "edit") done(...(await editor()));
    else done(historyPane());
    if (m.mode === "compare") await runDiff();
  } catch (e) {
    done(h("p", { class: "error" }, e.message));
    fail(e);
  }
}

async function fileOrGone(at) {
  try {
    return await fileAt(at);
  } catch (e) {
    if (e.status === 404 && !/route/.test(e.message)) return null;
    throw e;
  }
}

// ---- blame -------------------------------------------------------------------------------

async function blame() {
  const r = await api.get("/v1/memory/blame", q({ path: m.path, as_of: asOf() }));
  const detail = h("div", { id: "blame-detail", class: "detail", "aria-live": "polite" }, h("p", { class: "muted" }, "Point at or focus a line to see where it came from; click it to open the entry that caused it."));
  const lines = r.lines.map((l) => {
    const cause = (l.causes || []).find((c) => c.session) || null;
    const tell = () => fill(detail, blameDetail(l));
    return h(
      "li",
      {},
      h(
        "button",
        {
          type: "button", class: "line", dataset: { line: l.line, version: l.version },
          "aria-describedby": "blame-detail",
          onmouseenter: tell, onfocus: tell,
          onclick: () => (cause ? go("sessions", { session: cause.session, su: cause.user || "", entry: cause.id }) : tell()),
        },
        h("span", { class: "gutter" }, `v${l.version}`),
        h("span", { class: "src" }, l.text || " "),
      ),
    );
  });
  return [h("ol", { class: "blame", "aria-label": `${m.path}, line by line` }, lines), detail];
}

function blameDetail(l) {
  return [
    h("p", {}, h("strong", {}, `Line ${l.line}: version ${l.version}`), ` · ${when(l.at)} · ${l.source} · change #${l.id}`),
    (l.causes || []).length
      ? h(
          "ul",
          {},
          l.causes.map((c) => {
            const text = c.erased
              ? `[${c.erased.how === "whole" ? "erased" : "redacted"} by #${c.erased.by}]${c.erased.how === "whole" ? "" : " " + (c.payload.content || "")}`
              : c.payload && (typeof c.payload.content === "string" ? c.payload.content : c.payload.name || c.kind);
            return h(
              "li",
              {},
              c.session
                ? h("a", { href: href("sessions", { session: c.session, su: c.user || "", entry: c.id }) }, `#${c.id} in ${c.session}`)
                : `#${c.id}`,
              ` ${(c.payload && c.payload.role) || c.kind}: ${String(text || "").slice(0, 200)}`,
            );
          }),
        )
      : h("p", { class: "muted" }, "No conversation entry caused it (a hand edit, a sync or an undo)."),
  ];
}

// ---- compare -----------------------------------------------------------------------------

function compare() {
  const opts = (sel) => [
    h("option", { value: "0", selected: sel === 0 }, "v0 (empty)"),
    m.versions.map((v) => h("option", { value: String(v.version), selected: v.version === sel }, `v${v.version} · ${when(v.at)} · ${v.source}`)),
  ];
  const to = m.versions[m.at] ? m.versions[m.at].version : 0;
  const from = m.at > 0 ? m.versions[m.at - 1].version : 0;
  return [
    h(
      "form",
      { id: "compare", class: "row", onchange: () => runDiff().catch(fail), onsubmit: (ev) => ev.preventDefault() },
      h("label", {}, "From ", h("select", { name: "from" }, opts(from))),
      h("label", {}, "To ", h("select", { name: "to" }, opts(to))),
      h("label", {}, h("input", { type: "checkbox", name: "all" }), " every file"),
    ),
    h("div", { id: "diff" }),
  ];
}

async function runDiff() {
  const f = document.getElementById("compare");
  if (!f) return;
  const r = await api.get("/v1/memory/diff", q({ from: f.elements.from.value, to: f.elements.to.value }));
  let list = parseDiff(r.diff);
  if (!f.elements.all.checked) list = list.filter((x) => x.old === m.path || x.new === m.path);
  const d = document.getElementById("diff");
  if (d) fill(d, diffView(list));
}

// ---- edit --------------------------------------------------------------------------------

async function editor() {
  const f = await fileOrGone(undefined);
  const base = { content: f ? f.content : "", version: f ? f.memory_version : m.version };
  const area = h("textarea", { id: "editor", rows: "18", spellcheck: "false" });
  area.value = base.content;
  const conflict = h("div", { id: "conflict", role: "alert" });
  const save = async (ifVersion) => {
    try {
      const r = await api.put("/v1/memory/file", q(), { path: m.path, content: area.value, if_version: ifVersion });
      fill(conflict);
      say(r.recorded ? `Saved: version ${r.recorded.version}.` : "Nothing changed.");
      await reload();
    } catch (e) {
      if (e.status !== 409) return fail(e);
      const now = await fileOrGone(undefined);
      fill(
        conflict,
        h("h3", {}, "Conflict: the file changed since you opened it"),
        h("p", {}, `${e.message} It now reads (memory version ${now ? now.memory_version : "?"}):`),
        h("pre", { class: "current" }, now ? now.content : "(the file is gone)"),
        h(
          "div",
          { class: "row" },
          h("button", { type: "button", onclick: () => save(now ? now.memory_version : 0) }, "Save my text over it"),
          h("button", { type: "button", onclick: () => { area.value = now ? now.content : ""; base.version = now ? now.memory_version : 0; fill(conflict); } }, "Take theirs into the editor"),
        ),
      );
    }
  };
  return [
    m.at < m.versions.length - 1 ? h("p", { class: "muted" }, "Editing the newest version (the slider shows an older one).") : null,
    h("label", { for: "editor" }, `${m.path} (memory version ${base.version})`),
    area,
    h("div", { class: "row" }, h("button", { type: "button", id: "save", onclick: () => save(base.version) }, "Save as a new version")),
    conflict,
  ];
}

/** After a change: the file list, the versions (slider at the newest), the pane. */
async function reload() {
  await files();
  const path = m.files[m.path] ? m.path : "";
  m.path = "";
  dropped().catch(fail);
  const target = href("memory", { path, mode: "", v: "" });
  if (location.hash !== target) location.hash = target;
  else await showMemory(root, new URLSearchParams(target.split("?")[1] || ""), m.scope);
}

// ---- history: undo and forget --------------------------------------------------------------

function historyPane() {
  return h(
    "ol",
    { class: "versions", reversed: true },
    [...m.versions].reverse().map((v, j) => {
      const i = m.versions.length - 1 - j;
      return h(
        "li",
        { class: i === m.at ? "cur" : null },
        h("div", {}, h("strong", {}, `v${v.version}`), ` · ${when(v.at)} · ${v.source} · #${v.id} · ${v.paths.join(", ")}`),
        h(
          "div",
          { class: "row" },
          h("a", { class: "button", href: href("memory", { path: m.path, mode: "", v: i === m.versions.length - 1 ? "" : v.version }) }, "Show"),
          h("button", { type: "button", onclick: () => undo(v) }, "Undo to this version"),
          h("button", { type: "button", onclick: () => forget(v) }, "Forget this change"),
        ),
      );
    }),
  );
}

async function undo(v) {
  if (!confirm(`Bring the whole memory back to version ${v.version}? (Recorded as a new version.)`)) return;
  try {
    const r = await api.post("/v1/memory/undo", q(), { version: v.version });
    say(r.recorded ? `Back to version ${v.version}: now version ${r.recorded.version}.` : "The memory already is at that state.");
    await reload();
  } catch (e) {
    fail(e);
  }
}

async function forget(v) {
  if (!confirm(`Forget change #${v.id} (version ${v.version}), as if it was never made?`)) return;
  try {
    const r = await api.post("/v1/memory/forget", q(), { ids: [v.id] });
    say(`Forgotten: now version ${r.version}.`);
    await reload();
  } catch (e) {
    fail(e);
  }
}

// ---- dropped facts -------------------------------------------------------------------------

async function dropped() {
  const box = document.getElementById("dropped");
  if (!box) return;
  const r = await api.get("/v1/memory/dropped", q());
  if (!r.dropped.length) return fill(box);
  fill(
    box,
    h("h2", { id: "dropped-title" }, "Dropped facts"),
    h(
      "ul",
      { class: "list dropped" },
      r.dropped.map((d) =>
        h(
          "li",
          {},
          h("div", { class: "text" }, d.text),
          h("small", {}, `${d.path}${d.section ? ` · ${d.section}` : ""} · dropped by ${d.by} at v${d.version} · ${when(d.at)}`),
          d.present
            ? h("small", { class: "muted" }, " · stated again")
            : h("button", { type: "button", onclick: () => restore(d) }, "Restore"),
        ),
      ),
    ),
  );
}

async function restore(d) {
  try {
    const r = await api.post(`/v1/memory/dropped/${d.id}/restore`, q());
    say(r.recorded ? `Restored into ${d.path}: version ${r.recorded.version}.` : "The file states it already.");
    await reload();
  } catch (e) {
    fail(e);
  }
}
