// A small syntax highlighter for the review page, written for cofferdam (no network, no
// build step): it splits one line into tokens (keyword, string, comment, number, type) by
// the file's extension. It returns [class, text] pairs; the page inserts them as text.
"use strict";
const CofferdamHighlight = (() => {
  const words = (s) => new Set(s.split(" "));
  const C_LIKE = "if else for while do return break continue switch case default goto sizeof struct union enum typedef static const extern void int char long short unsigned signed float double bool true false NULL nullptr class public private protected virtual template typename namespace using new delete this throw try catch";
  const LANGS = {
    rust: { kw: words("as async await break const continue crate dyn else enum extern false fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait true type unsafe use where while"), line: "//", block: ["/*", "*/"], quotes: "\"" },
    c: { kw: words(C_LIKE + " include define ifdef ifndef endif"), line: "//", block: ["/*", "*/"], quotes: "\"'" },
    go: { kw: words("break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var true false nil"), line: "//", block: ["/*", "*/"], quotes: "\"'`" },
    js: { kw: words("async await break case catch class const continue debugger default delete do else export extends false finally for function if import in instanceof let new null return super switch this throw true try typeof undefined var void while with yield of interface type"), line: "//", block: ["/*", "*/"], quotes: "\"'`" },
    java: { kw: words(C_LIKE + " import package extends implements interface final abstract synchronized boolean byte instanceof null super"), line: "//", block: ["/*", "*/"], quotes: "\"'" },
    py: { kw: words("and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return True try while with yield self"), line: "#", quotes: "\"'" },
    sh: { kw: words("if then else elif fi for in do done while until case esac function return local export set unset echo exit"), line: "#", quotes: "\"'" },
    toml: { kw: words("true false"), line: "#", quotes: "\"'" },
    yaml: { kw: words("true false null yes no"), line: "#", quotes: "\"'" },
    json: { kw: words("true false null"), quotes: "\"" },
  };
  const EXT = { rs: "rust", c: "c", h: "c", cc: "c", cpp: "c", hpp: "c", go: "go", js: "js",
    mjs: "js", cjs: "js", ts: "js", tsx: "js", jsx: "js", java: "java", kt: "java", cs: "java",
    py: "py", sh: "sh", bash: "sh", zsh: "sh", toml: "toml", yml: "yaml", yaml: "yaml",
    json: "json" };
  function langOf(path) {
    const base = path.split("/").pop();
    if (base === "Makefile" || base === "Dockerfile" || base === ".envrc") return "sh";
    const dot = base.lastIndexOf(".");
    return dot < 0 ? null : (EXT[base.slice(dot + 1).toLowerCase()] || null);
  }
  const isWord = (c) => /[A-Za-z0-9_$]/.test(c);
  function line(text, lang) {
    const L = lang && LANGS[lang];
    if (!L) return [["", text]];
    const out = [];
    let plain = "";
    const flush = () => { if (plain) { out.push(["", plain]); plain = ""; } };
    let i = 0;
    while (i < text.length) {
      const c = text[i];
      if (L.line && text.startsWith(L.line, i)) {
        flush(); out.push(["hl-c", text.slice(i)]); break;
      }
      if (L.block && text.startsWith(L.block[0], i)) {
        const end = text.indexOf(L.block[1], i + L.block[0].length);
        const stop = end < 0 ? text.length : end + L.block[1].length;
        flush(); out.push(["hl-c", text.slice(i, stop)]); i = stop; continue;
      }
      if (L.quotes.includes(c)) {
        let j = i + 1;
        while (j < text.length && text[j] !== c) j += text[j] === "\\" ? 2 : 1;
        const stop = Math.min(j + 1, text.length);
        flush(); out.push(["hl-s", text.slice(i, stop)]); i = stop; continue;
      }
      if (isWord(c) && (i === 0 || !isWord(text[i - 1]))) {
        let j = i;
        while (j < text.length && isWord(text[j])) j++;
        const w = text.slice(i, j);
        let cls = "";
        if (/^[0-9]/.test(w)) cls = "hl-n";
        else if (L.kw.has(w)) cls = "hl-k";
        else if (/^[A-Z][a-z0-9]/.test(w) && lang !== "py") cls = "hl-t";
        if (cls) { flush(); out.push([cls, w]); } else { plain += w; }
        i = j; continue;
      }
      plain += c; i++;
    }
    flush();
    return out;
  }
  return { langOf, line };
})();
