// The review page of `cofferdam review --web`. Everything the job wrote (paths, diff lines,
// messages) reaches the document through textContent or createTextNode only, never as
// markup, so a file named <script> is shown as text. Requests carry the token in a header.
"use strict";
(() => {
  const TOKEN = new URLSearchParams(location.search).get("t") || "";
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };
  const ROLLUP_FILES = 8;
  let data = null;
  let view = "unified";

  async function api(method, path, body) {
    const init = { method, headers: { "X-Cofferdam-Token": TOKEN } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
    return r.json();
  }

  function showErrors(list) {
    const box = $("errors");
    box.replaceChildren();
    box.hidden = list.length === 0;
    for (const e of list) box.append(el("div", "", e));
  }

  function fact(dl, name, value) {
    if (value === undefined || value === null || value === "") return;
    dl.append(el("dt", "", name), el("dd", "", typeof value === "string" ? value : JSON.stringify(value)));
  }

  function renderSummary(d) {
    $("job").textContent = d.job;
    $("where").textContent = "applies to " + d.workdir;
    const dl = $("facts");
    dl.replaceChildren();
    const r = d.review || {};
    const ctx = r.review_context || {};
    const b = r.bundle || r;
    fact(dl, "state", ctx.job_state);
    const run = r.run;
    if (run) {
      fact(dl, "command", Array.isArray(run.command) ? run.command.join(" ") : run.command);
      if (run.executor) fact(dl, "tier", run.executor.name + " (" + run.executor.tier + ")");
      fact(dl, "ended", run.state + (run.exit_code === null || run.exit_code === undefined ? "" : ", exit " + run.exit_code) +
        (run.duration_ms === undefined ? "" : " in " + run.duration_ms + " ms"));
    }
    if (r.safety) {
      const yes = Object.entries(r.safety).filter(([k, v]) => v === true).map(([k]) => k.replaceAll("_", " "));
      const no = Object.entries(r.safety).filter(([k, v]) => v === false).map(([k]) => k.replaceAll("_", " "));
      fact(dl, "safety", (yes.length ? "yes: " + yes.join(", ") : "") + (no.length ? "\nno: " + no.join(", ") : ""));
    }
    if (r.network && r.network.policy) fact(dl, "network", r.network.policy.mode || r.network.policy);
    if (r.resources && r.resources.effective) fact(dl, "resources", r.resources.effective);
    const warnings = [].concat((run && run.warnings) || [], (r.safety && r.safety.warnings) || [], (r.resources && r.resources.limitations) || []);
    if (warnings.length) fact(dl, "warnings", warnings.map((w) => typeof w === "string" ? w : JSON.stringify(w)).join("\n"));
    const st = ctx.stage;
    const n = (x) => Array.isArray(x) ? x.length : x;
    if (st) {
      fact(dl, "staged", n(st.remaining) + " remaining, " + n(st.applied) + " applied");
      if (st.conflicts_now && st.conflicts_now.length)
        fact(dl, "conflicts now", st.conflicts_now.map((c) => c.path + ": " + c.reason).join("\n"));
      if (st.sensitive && st.sensitive.length)
        fact(dl, "sensitive", st.sensitive.map((c) => c.path + ": " + c.sensitive).join("\n"));
    }
    $("review-text").textContent = d.review_text || "";
    renderNotes(r.agent_notes);
  }

  // What the agent said through agentctl (`agent_notes` of the review JSON), as text.
  function renderNotes(notes) {
    const list = $("notes-list");
    list.replaceChildren();
    const shown = Array.isArray(notes) ? notes.filter((n) => n && typeof n === "object") : [];
    $("notes").hidden = shown.length === 0;
    for (const n of shown) {
      const li = el("li", "agent-note");
      li.append(el("span", "who", n.client === undefined || n.client === null ? "agent" : String(n.client)));
      if (typeof n.at_unix_ms === "number") li.append(" ", el("span", "note", when(n.at_unix_ms)));
      li.append(el("div", "text", n.text === undefined || n.text === null ? "" : String(n.text)));
      list.append(li);
    }
  }

  const when = (ms) => { try { return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC"; } catch (e) { return String(ms); } };

  // A change's identity: the hex of its path's bytes when it has them, else its path.
  const hexOf = (bytes) => bytes.map((b) => b.toString(16).padStart(2, "0")).join("");
  const keyOf = (x) => Array.isArray(x.path_bytes) ? "x:" + hexOf(x.path_bytes) : "p:" + x.path;

  // The review comments of one change, oldest first.
  function commentsOf(c) {
    const all = (data && data.review && data.review.review_comments) || [];
    const k = keyOf(c);
    return all.filter((m) => m && keyOf(m) === k);
  }

  function commentBox(m) {
    const d = el("div", "comment");
    const where = m.hunk ? (m.line ? "line " + m.line : "hunk") : "file";
    d.append(el("span", "note", where + " · " + when(m.at_unix_ms)));
    d.append(el("div", "text", m.text));
    return d;
  }

  // A form that keeps a comment on change `c` (on hunk `hunk`, line `line` when given).
  function commentForm(c, hunk, line) {
    const f = el("div", "comment-form");
    const ta = el("textarea", "comment-text");
    ta.rows = 3;
    ta.maxLength = 4096;
    ta.placeholder = line ? "Comment on line " + line : "Comment on " + c.path;
    const save = el("button", "comment-save", "Save comment");
    save.type = "button";
    const cancel = el("button", "comment-cancel", "Cancel");
    cancel.type = "button";
    cancel.addEventListener("click", () => f.remove());
    save.addEventListener("click", async () => {
      const body = { text: ta.value };
      if (Array.isArray(c.path_bytes)) body.path_bytes = hexOf(c.path_bytes); else body.path = c.path;
      if (hunk) body.hunk = hunk;
      if (line) body.line = line;
      save.disabled = true;
      await act("/api/comment", body);
    });
    f.append(ta, el("div", "", ""));
    f.lastChild.append(save, " ", cancel);
    return f;
  }

  // The remaining changes as a tree of directories.
  function buildTree(changes) {
    const root = { name: "", dirs: new Map(), files: [], self: null };
    for (const c of changes) {
      const parts = c.path.split("/");
      let node = root;
      for (const p of parts.slice(0, -1)) {
        if (!node.dirs.has(p)) node.dirs.set(p, { name: p, dirs: new Map(), files: [], self: null });
        node = node.dirs.get(p);
      }
      const last = parts[parts.length - 1];
      if (c.kind === "added" && !c.unified && !c.hunks && node.dirs.has(last) === false && c.summary && /director/.test(c.summary)) {
        node.dirs.set(last, { name: last, dirs: new Map(), files: [], self: c });
      } else if (node.dirs.has(last) && !node.dirs.get(last).self && /director/.test(c.summary || "")) {
        node.dirs.get(last).self = c;
      } else {
        node.files.push(c);
      }
    }
    return root;
  }

  function stats(node) {
    let files = 0, added = 0, ins = 0, del = 0, sensitive = 0;
    const walk = (n) => {
      if (n.self) { if (n.self.kind === "added") added++; files++; }
      for (const f of n.files) { files++; if (f.kind === "added") added++; ins += f.insertions || 0; del += f.deletions || 0; if (f.sensitive) sensitive++; }
      for (const d of n.dirs.values()) walk(d);
    };
    walk(node);
    return { files, added, ins, del, sensitive };
  }

  function renderDir(node, path, parent) {
    const names = [...node.dirs.keys()].sort();
    for (const name of names) {
      const d = node.dirs.get(name);
      const p = path ? path + "/" + name : name;
      const s = stats(d);
      const det = el("details", "dir");
      det.dataset.path = p;
      const sum = el("summary");
      sum.append(el("span", "", p + "/"));
      const newDir = s.added === s.files;
      if (newDir) sum.append(" ", el("span", "badge", "new directory"));
      sum.append(" ", el("span", "note", s.files + " change" + (s.files === 1 ? "" : "s") + (s.ins || s.del ? ", +" + s.ins + " -" + s.del : "")));
      if (s.sensitive) sum.append(" ", el("span", "badge sensitive", s.sensitive + " sensitive"));
      det.append(sum);
      // A new directory of many files is rolled up (closed) unless something in it is sensitive.
      det.open = !(newDir && s.files >= ROLLUP_FILES) || s.sensitive > 0;
      if (d.self) det.append(renderFile(d.self));
      renderDir(d, p, det);
      parent.append(det);
    }
    for (const f of node.files.sort((a, b) => (a.path < b.path ? -1 : 1))) parent.append(renderFile(f));
  }

  function lineRow(table, oldNo, newNo, mark, text, lang) {
    const tr = el("tr");
    const cls = mark === "+" ? "add" : mark === "-" ? "del" : "";
    tr.append(el("td", "num", oldNo), el("td", "num", newNo), el("td", "mark " + cls, mark === " " ? "" : mark));
    const td = el("td", cls);
    code(td, text, lang);
    tr.append(td);
    table.append(tr);
    return tr;
  }

  function commentRow(content) {
    const tr = el("tr", "comment-row");
    const td = el("td");
    td.colSpan = 4;
    td.append(content);
    tr.append(td);
    return tr;
  }

  function code(td, text, lang) {
    for (const [cls, t] of CofferdamHighlight.line(text, lang)) {
      if (cls) td.append(el("span", cls, t)); else td.append(document.createTextNode(t));
    }
  }

  // The host's and the staged file's numbers of a hunk's first shown line: its header's
  // (`@@ -a,b +c,d @@`), since the lines include context before the change that
  // `old_start`/`new_start` name.
  function firstLines(h) {
    const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)/.exec(h.header || "");
    if (!m) return [h.old_start, h.new_start];
    // An empty side (`-0,0`) starts after line 0.
    return [Math.max(1, Number(m[1])), Math.max(1, Number(m[2]))];
  }

  function splitRows(table, h, lang) {
    let [o, n] = firstLines(h);
    const lines = h.lines;
    let i = 0;
    const row = (l, r) => {
      const tr = el("tr");
      for (const side of [l, r]) {
        if (side) {
          tr.append(el("td", "num", side.no));
          const td = el("td", "code " + side.cls);
          code(td, side.text, lang);
          tr.append(td);
        } else {
          tr.append(el("td", "num"), el("td", "code empty"));
        }
      }
      table.append(tr);
    };
    while (i < lines.length) {
      const m = lines[i][0];
      if (m === " ") { row({ no: o++, text: lines[i].slice(1), cls: "" }, { no: n++, text: lines[i].slice(1), cls: "" }); i++; continue; }
      const dels = [], adds = [];
      while (i < lines.length && lines[i][0] === "-") dels.push(lines[i++].slice(1));
      while (i < lines.length && lines[i][0] === "+") adds.push(lines[i++].slice(1));
      for (let k = 0; k < Math.max(dels.length, adds.length); k++) {
        row(k < dels.length ? { no: o++, text: dels[k], cls: "del" } : null,
            k < adds.length ? { no: n++, text: adds[k], cls: "add" } : null);
      }
    }
  }

  function renderFile(c) {
    const box = el("div", "file");
    box.dataset.path = c.path;
    const head = el("div", "head");
    const label = el("label");
    const cb = el("input");
    cb.type = "checkbox";
    cb.className = "pick-file";
    cb.dataset.path = c.path;
    // A name that is not UTF-8: its identity is its bytes, passed on as hex.
    if (Array.isArray(c.path_bytes)) cb.dataset.hex = hexOf(c.path_bytes);
    label.append(cb, " ", el("span", "path", c.path));
    head.append(label, el("span", "badge", c.kind.replace("_", " ")));
    if (c.insertions || c.deletions) {
      const s = el("span", "stat");
      s.append(el("span", "ins", "+" + c.insertions), " ", el("span", "del", "-" + c.deletions));
      head.append(s);
    }
    if (c.mode) head.append(el("span", "badge", (c.old_mode && c.old_mode !== c.mode ? c.old_mode + " → " : "") + c.mode));
    for (const f of c.mode_flags || []) head.append(el("span", "badge sensitive", f));
    if (c.binary) head.append(el("span", "badge", "binary or large"));
    if (c.sensitive) head.append(el("span", "badge sensitive", "sensitive: " + c.sensitive));
    if (c.conflict) head.append(el("span", "badge conflict", "host changed: " + c.conflict));
    const say = el("button", "comment-file", "Comment");
    say.type = "button";
    head.append(say);
    box.append(head);
    const comments = commentsOf(c);
    const inline = new Set();
    const list = el("div", "comments");
    box.append(list);
    say.addEventListener("click", () => {
      if (!list.querySelector(":scope > .comment-form")) list.append(commentForm(c));
      list.querySelector(".comment-text").focus();
    });
    if (c.summary) box.append(el("div", "summaryline", c.summary));
    const lang = CofferdamHighlight.langOf(c.path);
    if (c.hunks && c.hunks.length) {
      const table = el("table", view === "split" ? "diff split" : "diff");
      for (const h of c.hunks) {
        const tr = el("tr", "hunkhead");
        const td = el("td");
        td.colSpan = 4;
        const lab = el("label");
        const hb = el("input");
        hb.type = "checkbox";
        hb.className = "pick-hunk";
        hb.dataset.hunk = h.id;
        hb.dataset.path = c.path;
        lab.append(hb, " ", el("span", "", h.header));
        td.append(lab);
        tr.append(td);
        table.append(tr);
        if (view === "split") { splitRows(table, h, lang); continue; }
        let [o, n] = firstLines(h);
        for (const l of h.lines) {
          const m = l[0];
          const newNo = m === "-" ? "" : n++;
          const tr = lineRow(table, m === "+" ? "" : o++, newNo, m, l.slice(1), lang);
          if (newNo === "") continue;
          // A line of the staged file takes a comment: click its number.
          const cell = tr.children[1];
          cell.classList.add("commentable");
          cell.title = "Comment on line " + newNo;
          cell.dataset.line = newNo;
          cell.dataset.hunk = h.id;
          cell.addEventListener("click", () => {
            if (tr.nextSibling && tr.nextSibling.classList.contains("comment-row")) return;
            tr.after(commentRow(commentForm(c, h.id, newNo)));
          });
          let at = tr;
          for (const m2 of comments.filter((x) => x.hunk === h.id && x.line === newNo)) {
            const row = commentRow(commentBox(m2));
            at.after(row);
            at = row;
            inline.add(m2);
          }
        }
      }
      box.append(table);
    } else if (c.unified) {
      box.append(el("pre", "", c.unified));
    }
    // Comments on the file or a hunk, and line comments not shown at their line.
    for (const m of comments) if (!inline.has(m)) list.append(commentBox(m));
    cb.addEventListener("change", () => {
      for (const hb of box.querySelectorAll(".pick-hunk")) { hb.checked = cb.checked; hb.disabled = cb.checked; }
    });
    return box;
  }

  function render() {
    if (!data) return;
    renderSummary(data);
    const diff = data.diff || { changes: [] };
    const changes = diff.changes || [];
    $("counts").textContent = changes.length + " remaining" + (diff.applied_not_shown ? ", " + diff.applied_not_shown + " applied" : "") +
      (diff.message ? " — " + diff.message : "");
    const tree = $("tree");
    tree.replaceChildren();
    if (changes.length === 0) tree.append(el("p", "note", "Nothing left staged."));
    renderDir(buildTree(changes), "", tree);
    // Comments on files no longer staged (applied or dropped) stay readable.
    const staged = new Set(changes.map(keyOf));
    const orphans = ((data.review && data.review.review_comments) || []).filter((m) => m && !staged.has(keyOf(m)));
    const other = $("other-comments");
    other.replaceChildren();
    $("other-comments-section").hidden = orphans.length === 0;
    for (const m of orphans) {
      const d = commentBox(m);
      d.prepend(el("span", "path", m.path), " ");
      other.append(d);
    }
    showErrors(data.errors || []);
    for (const b of ["apply", "drop", "select-all"]) $(b).disabled = changes.length === 0;
  }

  async function load() {
    try {
      data = await api("GET", "/api/review");
      render();
    } catch (e) {
      showErrors([String(e)]);
    }
  }

  function showResult(res) {
    const box = $("result-steps");
    box.replaceChildren();
    $("result").hidden = false;
    if (res.error) box.append(el("div", "step failed", res.error));
    for (const s of res.steps || []) {
      const d = el("div", "step" + (s.code === 0 ? "" : " failed"));
      d.append(el("div", "note", "cofferdam " + s.command + " → exit " + s.code));
      d.append(el("pre", "", s.output));
      box.append(d);
    }
  }

  async function act(path, body) {
    for (const b of ["apply", "drop"]) $(b).disabled = true;
    try {
      const res = await api("POST", path, body);
      showResult(res);
    } catch (e) {
      showErrors([String(e)]);
    }
    await load();
  }

  // The ticked files (by path, or by their bytes' hex) and the ticked hunks of other files.
  function picked() {
    const files = [...document.querySelectorAll(".pick-file:checked")];
    const paths = files.filter((c) => !c.dataset.hex).map((c) => c.dataset.path);
    const path_bytes = files.filter((c) => c.dataset.hex).map((c) => c.dataset.hex);
    const whole = new Set(files.map((c) => c.dataset.path));
    const hunks = [...document.querySelectorAll(".pick-hunk:checked")]
      .filter((h) => !whole.has(h.dataset.path)).map((h) => h.dataset.hunk);
    return { paths, path_bytes, hunks };
  }
  $("apply").addEventListener("click", () => act("/api/apply", picked()));
  $("drop").addEventListener("click", () => {
    const sel = picked();
    const files = sel.paths.length + sel.path_bytes.length;
    if (files === 0 && sel.hunks.length) {
      showResult({ error: "Drop works on whole files: tick the file. A single hunk cannot be dropped; apply the hunks you want, then drop the file." });
      return;
    }
    const question = files
      ? "Discard the " + files + " ticked file(s) from the stage? The rest stays staged; the workdir is not touched."
      : "Nothing is ticked: discard everything still staged in this job? The workdir is not touched.";
    if (confirm(question)) act("/api/drop", { paths: sel.paths, path_bytes: sel.path_bytes });
  });
  $("select-all").addEventListener("click", () => {
    for (const cb of document.querySelectorAll(".pick-file")) { cb.checked = true; cb.dispatchEvent(new Event("change")); }
  });
  for (const r of document.querySelectorAll("input[name=view]")) {
    r.addEventListener("change", () => { view = r.value; render(); });
  }

  // The server stops when the page stops beating (closed tab) or says it is leaving.
  const beat = () => api("POST", "/api/heartbeat", {}).catch(() => {});
  beat();
  setInterval(beat, 5000);
  addEventListener("pagehide", () => {
    fetch("/api/close", { method: "POST", keepalive: true, headers: { "X-Cofferdam-Token": TOKEN, "Content-Type": "application/json" }, body: "{}" }).catch(() => {});
  });
  load();
})();
