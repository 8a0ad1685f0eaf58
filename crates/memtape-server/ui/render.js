// memtape memory browser: rendering helpers. DOM building (text always as text nodes), a
// small safe markdown renderer (everything HTML-escaped first; links shown as text), unified
// diffs, times.

/** An element: `h("p", {class: "x", onclick: f}, "text", child, ...)`. */
export function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k in e && typeof v !== "string") e[k] = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  add(e, children);
  return e;
}

function add(e, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) add(e, c);
    else e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces the children of `e`. */
export function fill(e, ...children) {
  e.replaceChildren();
  add(e, children);
  return e;
}

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
export const escape = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);

/** Inline markdown on already escaped text: code, bold, italic, links as text. */
function inline(s) {
  const codes = [];
  s = s.replace(/`([^`]+)`/g, (_, c) => {
    codes.push(c);
    return `\u0000${codes.length - 1}\u0000`;
  });
  s = s
    .replace(/!?\[([^\]]*)\]\(([^)\s]*)[^)]*\)/g, (_, t, u) => (t && u && t !== u ? `${t} (${u})` : t || u))
    .replace(/\*\*(?=\S)(.+?)\*\*/g, "<strong>$1</strong>")
    .replace(/__(?=\S)(.+?)__/g, "<strong>$1</strong>")
    .replace(/(^|[^*\w])\*(?=\S)([^*]+?)\*/g, "$1<em>$2</em>")
    .replace(/(^|[^_\w])_(?=\S)([^_]+?)_(?!\w)/g, "$1<em>$2</em>");
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => `<code>${codes[+i]}</code>`);
}

/** Markdown to HTML: headings, lists, quotes, rules, fenced code, paragraphs. Safe: the
 * text is escaped before any markup is added, and no link or image becomes markup. */
export function markdown(src) {
  const lines = escape(src).split("\n");
  const out = [];
  let para = [];
  let list = null; // "ul" | "ol"
  const flush = () => {
    if (para.length) out.push(`<p>${inline(para.join(" "))}</p>`);
    para = [];
  };
  const close = () => {
    if (list) out.push(`</${list}>`);
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)/);
    if (fence) {
      flush();
      close();
      const code = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) code.push(lines[i]);
      out.push(`<pre><code>${code.join("\n")}</code></pre>`);
      continue;
    }
    let m;
    if (!line.trim()) {
      flush();
      close();
    } else if ((m = line.match(/^(#{1,6})\s+(.*?)\s*#*\s*$/))) {
      flush();
      close();
      out.push(`<h${m[1].length}>${inline(m[2])}</h${m[1].length}>`);
    } else if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      close();
      out.push("<hr>");
    } else if ((m = line.match(/^(\s*)([-*+]|\d+[.)])\s+(.*)$/))) {
      flush();
      const kind = /\d/.test(m[2]) ? "ol" : "ul";
      if (list !== kind) {
        close();
        out.push(`<${kind}>`);
        list = kind;
      }
      const depth = Math.min(3, Math.floor(m[1].replace(/\t/g, "  ").length / 2));
      const task = m[3].match(/^\[([ xX])\]\s+(.*)$/);
      const body = task ? `${task[1] === " " ? "☐" : "☑"} ${inline(task[2])}` : inline(m[3]);
      out.push(depth ? `<li class="d${depth}">${body}</li>` : `<li>${body}</li>`);
    } else if ((m = line.match(/^\s*&gt;\s?(.*)$/))) {
      flush();
      close();
      out.push(`<blockquote>${inline(m[1])}</blockquote>`);
    } else {
      close();
      para.push(line.trim());
    }
  }
  flush();
  close();
  return out.join("\n");
}

/** The files of a unified diff: `[{old, new, path, lines: [{t: "+"|"-"|" "|"@", s}]}]`. */
export function parseDiff(text) {
  const files = [];
  let f = null;
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i];
    if (l.startsWith("--- ") && (lines[i + 1] || "").startsWith("+++ ")) {
      const strip = (n) => (n === "/dev/null" ? null : n.replace(/^[ab]\//, ""));
      const o = strip(l.slice(4));
      const n = strip(lines[i + 1].slice(4));
      f = { old: o, new: n, path: n || o, lines: [] };
      files.push(f);
      i++;
    } else if (f && l.startsWith("@@")) f.lines.push({ t: "@", s: l });
    else if (f && l && "+- \\".includes(l[0])) f.lines.push({ t: l[0] === "\\" ? "@" : l[0], s: l.slice(1) });
  }
  return files;
}

/** A diff as a table-like block, one row per line. */
export function diffView(files) {
  if (!files.length) return h("p", { class: "muted" }, "No change.");
  return files.map((f) =>
    h(
      "section",
      { class: "diff" },
      h("h4", {}, f.old === null ? `${f.path} (created)` : f.new === null ? `${f.path} (deleted)` : f.path),
      h(
        "pre",
        { class: "diff-lines" },
        f.lines.map((l) =>
          h(
            "span",
            { class: l.t === "+" ? "add" : l.t === "-" ? "del" : l.t === "@" ? "hunk" : "ctx" },
            l.t === "@" ? l.s : `${l.t}${l.s}`,
          ),
        ),
      ),
    ),
  );
}

/** A time for people: local date and time to the second. */
export function when(t) {
  if (!t) return "";
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** A `datetime-local` value (local time) as RFC 3339, or "" for none. */
export function rfc3339(local) {
  if (!local) return "";
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? "" : d.toISOString();
}

/** A message's text: its content string, or its text parts joined. */
export function contentText(c) {
  if (c === null || c === undefined) return "";
  if (typeof c === "string") return c;
  if (Array.isArray(c)) {
    return c
      .map((p) => (p && p.type === "text" ? p.text : `[${(p && p.type) || "part"}]`))
      .join("\n");
  }
  return JSON.stringify(c);
}

/** Pretty JSON, or the text itself when it is not JSON. */
export function pretty(v) {
  if (typeof v === "string") {
    try {
      return JSON.stringify(JSON.parse(v), null, 2);
    } catch {
      return v;
    }
  }
  return JSON.stringify(v, null, 2);
}
