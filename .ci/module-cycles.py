#!/usr/bin/env python3
"""Fail when a crate's modules import each other in a cycle.

For every `crate::`, `super::` and `self::` path in a crate's `src/` (in `use` trees and
inline, outside comments, strings and `#[cfg(test)]` modules) it records an edge from the
module that names the path to the module the path reaches. Edges between a module and its
own ancestors or descendants are part of one module tree and are not counted; any other edge
is lifted to the two sibling modules under the lowest common ancestor, so `a::x -> b::y`
counts as `a -> b`. A strongly connected set of more than one module is a cycle.

Usage: .ci/module-cycles.py [CRATE_DIR ...]   (default: every crates/*)
"""
import os
import re
import sys

# Edges of cycles that predate this check, each tolerated (left out of the graph) until the
# work that removes it lands, as ("crate", "from", "to"). None is left: the last three (the
# sandbox's init/scoped, the CLI's egress/cmd, the policy's plan/scope) went with the run
# lifecycle (issue 18). Delete an entry when its edge is gone (the check says so).
KNOWN = set()


def strip(text):
    """Blank out comments, string and char literals, keeping offsets and newlines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and not re.match(r"\w", text[i - 1:i] or " "):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", text[i:i + 12])
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(text):
    """Remove `#[cfg(test)] mod name { ... }` bodies (test code may reach anywhere)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
        if not m:
            return text
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        text = text[:m.start()] + text[j:]


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("lib", "main", "mod"):
        rel = rel[:-1]
    return tuple(rel)


def use_paths(tree, prefix=()):
    """Expand a use tree (`a::{b, c::d as e, self}`) into its paths."""
    tree = tree.strip()
    parts, depth, cur = [], 0, ""
    m = re.match(r"^((?:\w+\s*::\s*)*)\{(.*)\}$", tree, re.S)
    if m:
        head = tuple(x.strip() for x in m.group(1).split("::") if x.strip())
        for ch in m.group(2):
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            cur += ch
        parts.append(cur)
        res = []
        for p in parts:
            if p.strip():
                res.extend(use_paths(p, prefix + head))
        return res
    tree = re.sub(r"\s+as\s+\w+$", "", tree)
    segs = tuple(x.strip() for x in tree.split("::") if x.strip())
    if segs and segs[-1] == "self":
        segs = segs[:-1]
    return [prefix + segs]


def resolve(segs, here, modules, is_dir_mod):
    """The deepest known module a path reaches, or None when it leaves the crate."""
    if not segs:
        return None
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] in ("self", "super"):
        base, rest = here, segs
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    else:
        return None
    best = base
    for k in range(1, len(rest) + 1):
        if base + tuple(rest[:k]) in modules:
            best = base + tuple(rest[:k])
        else:
            break
    return best


def crate_edges(src):
    files = []
    for root, _, names in os.walk(src):
        files += [os.path.join(root, x) for x in names if x.endswith(".rs")]
    modules = {module_of(src, f) for f in files}
    edges = {}
    for f in files:
        here = module_of(src, f)
        with open(f, encoding="utf-8") as fh:
            text = drop_test_modules(strip(fh.read()))
        paths = []
        for m in re.finditer(r"\buse\s+([^;]*);", text):
            paths += use_paths(m.group(1))
        for m in re.finditer(r"(?<![\w:])((?:crate|self|super)(?:\s*::\s*\w+)+)", text):
            paths.append(tuple(x.strip() for x in m.group(1).split("::")))
        for p in paths:
            to = resolve(p, here, modules, None)
            if to is None or to[:len(here)] == here or here[:len(to)] == to:
                continue
            k = 0
            while here[k] == to[k]:
                k += 1
            a, b = here[:k + 1], to[:k + 1]
            edges.setdefault((a, b), f"{os.path.relpath(f)}: {'::'.join(p)}")
    return modules, edges


def sccs(nodes, adj):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main(argv):
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    crates = argv or sorted(os.path.join(top, "crates", c) for c in os.listdir(os.path.join(top, "crates")))
    bad = 0
    for crate in crates:
        src = os.path.join(crate, "src")
        if not os.path.isdir(src):
            continue
        name = os.path.basename(os.path.normpath(crate))
        modules, edges = crate_edges(src)
        adj = {}
        for a, b in edges:
            if (name, "::".join(a), "::".join(b)) in KNOWN:
                print(f"{name}: tolerated edge of an old cycle: {'::'.join(a)} -> {'::'.join(b)}")
                continue
            adj.setdefault(a, set()).add(b)
        present = {("::".join(a), "::".join(b)) for a, b in edges}
        for crate_name, a, b in sorted(KNOWN):
            if crate_name == name and (a, b) not in present:
                print(f"{name}: {a} -> {b} is gone: delete it from KNOWN in {__file__}")
        for comp in sccs(modules, adj):
            if len(comp) < 2:
                continue
            bad = 1
            print(f"{name}: module cycle: {' <-> '.join(sorted('::'.join(m) for m in comp))}")
            for (a, b), where in sorted(edges.items()):
                if a in comp and b in comp and b in adj.get(a, ()):
                    print(f"  {'::'.join(a)} -> {'::'.join(b)}  ({where})")
    if bad:
        print("move what both sides need into a module both import, or invert the dependency")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
