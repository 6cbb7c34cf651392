#!/usr/bin/env python3
"""Checks that docs/openapi.yaml and the daemon's HTTP routes agree.

    openapi_check.py OPENAPI_YAML DAEMON_DIR [--no-yaml]

Routes are read from the C code, the way the daemon matches them:

  daemon/api.c        route_get(): strcmp(path, "/x") is GET /api/v1/x;
                      strncmp(path, "/x/", n) is GET /api/v1/x/{param}, plus
                      GET /api/v1/x/{param}/y for every strcmp(rest, "/y") in
                      the function that branch calls; api_handle():
                      strcmp(url, "/metrics") is GET /metrics (url "/" is the
                      dashboard, not part of the API)
  daemon/api_write.c  api_write(): the same comparisons in one condition,
                      POST only when the condition says `post &&`, else POST
                      and DELETE (api_write serves nothing else)

and compared, as (method, path) pairs with parameter names ignored, with the
paths and operations of the OpenAPI document. A comparison against a "/..."
literal that this script cannot place is an error too, so that a new kind of
route makes the check fail rather than go unseen. HEAD (served wherever GET
is) is not compared. Every POST and DELETE in the document must name the
bearerAuth security scheme.

Python 3 standard library only. PyYAML is used when it is installed; without
it (or with --no-yaml) the document's paths and methods are read by
indentation, which is all this check needs.

Exit status: 0 they agree, 1 they drifted (each difference on stderr), 2 bad
usage or unreadable input.
"""
import os
import re
import sys

API = "/api/v1"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
COMPARED = ("get", "put", "post", "delete", "patch")

# ---------------------------------------------------------------------------
# C side


def strip_comments(src):
    """Blanks out C comments (keeping offsets and newlines), leaving strings and chars alone."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_close(src, i, open_ch, close_ch):
    """Index just past the bracket that closes the one at src[i], skipping strings."""
    depth, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            i = j + 1
            continue
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced '%s' at offset %d" % (open_ch, i))


def functions(src):
    """{name: (body_start, body_end)} of the file's function definitions (at column 0)."""
    out = {}
    for m in re.finditer(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\(([^;{}]*)\)\s*\{", src, re.M):
        if m.group(1) in ("if", "while", "for", "switch"):
            continue
        start = m.end() - 1
        out[m.group(1)] = (start, match_close(src, start, "{", "}"))
    return out


# strcmp(VAR, "/lit") / strncmp(VAR, "/lit", n): the route comparisons.
CMP = re.compile(r"\b(strn?cmp)\s*\(\s*(\w+)\s*,\s*\"(/[^\"]*)\"")


def conditions(src, start, end):
    """(cond_start, cond_end, body_start, body_end) of every if statement in src[start:end]."""
    out = []
    for m in re.finditer(r"\bif\s*\(", src[start:end]):
        p = start + m.end() - 1
        q = match_close(src, p, "(", ")")
        b = q
        while b < end and src[b].isspace():
            b += 1
        if b < end and src[b] == "{":
            be = match_close(src, b, "{", "}")
        else:
            be = src.find(";", b) + 1
        out.append((p, q, b, be))
    return out


def c_routes(daemon_dir):
    """{(method, path with '{}' for parameters): 'file:line'} and a list of problems."""
    routes, problems = {}, []
    for fname, write in (("api.c", False), ("api_write.c", True)):
        path = os.path.join(daemon_dir, fname)
        try:
            src = strip_comments(open(path, encoding="utf-8").read())
        except OSError as e:
            raise SystemExit("openapi_check: cannot read %s: %s" % (path, e.strerror)) from None
        funcs = functions(src)
        consumed = set()  # offsets of comparisons placed in a route (or knowingly ignored)

        def line(off):
            return "%s:%d" % (fname, src.count("\n", 0, off) + 1)

        def add(method, route, off):
            routes.setdefault((method, route), line(off))

        def suffixes_in(fn_name, seen=()):
            """strcmp(rest, "/y") literals in a function and the file's functions it calls."""
            if fn_name not in funcs or fn_name in seen:
                return []
            s, e = funcs[fn_name]
            out = []
            for m in CMP.finditer(src, s, e):
                if m.group(1) == "strcmp" and m.group(2) == "rest":
                    out.append((m.group(3), m.start()))
            for call in re.finditer(r"\b(\w+)\s*\(", src[s:e]):
                out += suffixes_in(call.group(1), seen + (fn_name,))
            return out

        for fn, (fs, fe) in funcs.items():
            for cs, ce, bs, be in conditions(src, fs, fe):
                cmps = list(CMP.finditer(src, cs, ce))
                if not cmps:
                    continue
                cond = src[cs:ce]
                if write:
                    methods = ["post"] if re.search(r"\bpost\s*&&", cond) else ["post", "delete"]
                else:
                    methods = ["get"]
                exact = [m for m in cmps if m.group(1) == "strcmp" and m.group(2) == "path"]
                prefix = [m for m in cmps if m.group(1) == "strncmp" and m.group(2) == "path"]
                suffix = [m for m in cmps if m.group(1) == "strcmp" and m.group(2) == "rest"]
                root = [m for m in cmps if m.group(1) == "strcmp" and m.group(2) == "url"]
                for m in root:
                    consumed.add(m.start())
                    if m.group(3) != "/":  # "/" is the dashboard's index.html
                        add("get", m.group(3), m.start())
                for m in exact:
                    consumed.add(m.start())
                    for meth in methods:
                        add(meth, API + m.group(3), m.start())
                for m in prefix:
                    consumed.add(m.start())
                    base = API + m.group(3).rstrip("/") + "/{}"
                    if suffix:  # "/x/" + param + "/y" in one condition (api_write.c)
                        for s in suffix:
                            consumed.add(s.start())
                            for meth in methods:
                                add(meth, base + s.group(3), m.start())
                        continue
                    for meth in methods:
                        add(meth, base, m.start())
                    # Sub-resources matched by the function this branch calls (get_commit: "/build-log").
                    for call in re.finditer(r"\b(\w+)\s*\(", src[bs:be]):
                        for lit, off in suffixes_in(call.group(1)):
                            consumed.add(off)
                            for meth in methods:
                                add(meth, base + lit, m.start())
        for m in CMP.finditer(src):
            if m.start() not in consumed:
                problems.append("%s: cannot place %s(%s, \"%s\") in a route; update "
                                "tests/integration/openapi_check.py if this is a new kind of route"
                                % (line(m.start()), m.group(1), m.group(2), m.group(3)))
    if not routes:
        problems.append("no routes found in %s: has the routing code moved?" % daemon_dir)
    return routes, problems


# ---------------------------------------------------------------------------
# OpenAPI side


def strip_yaml_comment(s):
    """A line without its '# comment' (outside quotes)."""
    q = None
    for i, c in enumerate(s):
        if q:
            if c == q:
                q = None
        elif c in "\"'":
            q = c
        elif c == "#" and (i == 0 or s[i - 1] in " \t"):
            return s[:i]
    return s


def unquote(key):
    key = key.strip()
    if len(key) >= 2 and key[0] == key[-1] and key[0] in "\"'":
        return key[1:-1]
    return key


def yaml_operations_by_indent(text):
    """{path: {method: operation text}} from the 'paths:' block, read by indentation."""
    ops = {}
    lines = text.splitlines()
    i, n = 0, len(lines)
    while i < n and not re.match(r"^paths\s*:\s*$", strip_yaml_comment(lines[i]).rstrip()):
        i += 1
    if i == n:
        return ops
    i += 1
    path_indent = op_indent = None
    path = method = None
    block = []

    def flush():
        if path is not None and method is not None:
            ops[path][method] = "\n".join(block)

    while i < n:
        raw = lines[i]
        content = strip_yaml_comment(raw).rstrip()
        i += 1
        if not content.strip():
            block.append(raw)
            continue
        indent = len(content) - len(content.lstrip(" "))
        if indent == 0:
            break  # the next top-level key: end of paths
        m = re.match(r"^\s*(\"[^\"]*\"|'[^']*'|[^:\s][^:]*?)\s*:(\s|$)", content)
        if path_indent is None:
            path_indent = indent
        if indent == path_indent:
            flush()
            method = None
            if not m:
                raise ValueError("paths: cannot read line %r" % raw)
            path = unquote(m.group(1))
            ops.setdefault(path, {})
            op_indent = None
            continue
        if indent < path_indent:
            raise ValueError("paths: unexpected indentation at line %r" % raw)
        if op_indent is None:
            op_indent = indent
        if indent == op_indent:
            flush()
            method = None
            block = []
            key = unquote(m.group(1)) if m else ""
            if key.lower() in METHODS:
                method = key.lower()
            continue
        block.append(raw)
    flush()
    return ops


def yaml_operations(text, use_yaml):
    """{path: {method: operation}} where operation is a dict (PyYAML) or its text (fallback)."""
    if use_yaml:
        try:
            import yaml  # noqa: PLC0415 (optional)
        except ImportError:
            use_yaml = False
    if not use_yaml:
        return yaml_operations_by_indent(text)
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("paths"), dict):
        raise ValueError("no 'paths' mapping")
    return {str(p): {m.lower(): op for m, op in (item or {}).items() if str(m).lower() in METHODS}
            for p, item in doc["paths"].items()}


def has_bearer(op):
    if isinstance(op, dict):
        return any(isinstance(req, dict) and "bearerAuth" in req for req in op.get("security") or [])
    return re.search(r"^\s*-\s*bearerAuth\s*:", op, re.M) is not None


# ---------------------------------------------------------------------------


def normalise(path):
    return re.sub(r"\{[^}]*\}", "{}", path)


def main(argv):
    args = [a for a in argv[1:] if a != "--no-yaml"]
    if len(args) != 2:
        print("usage: openapi_check.py OPENAPI_YAML DAEMON_DIR [--no-yaml]", file=sys.stderr)
        return 2
    yaml_path, daemon_dir = args
    try:
        text = open(yaml_path, encoding="utf-8").read()
    except OSError as e:
        print("openapi_check: cannot read %s: %s" % (yaml_path, e.strerror), file=sys.stderr)
        return 2
    try:
        ops = yaml_operations(text, "--no-yaml" not in argv)
    except Exception as e:  # a YAML syntax error is drift too: say where
        print("openapi_check: %s: cannot read the paths: %s" % (yaml_path, e), file=sys.stderr)
        return 1
    try:
        code, problems = c_routes(daemon_dir)
    except ValueError as e:
        print("openapi_check: %s: %s" % (daemon_dir, e), file=sys.stderr)
        return 2

    doc = {}
    for p, methods in ops.items():
        for m, op in methods.items():
            if m in COMPARED:
                doc[(m, normalise(p))] = (p, op)
    if not re.search(r"^openapi\s*:\s*[\"']?3\.0\.\d", text, re.M):
        problems.append("%s: 'openapi: 3.0.x' missing" % yaml_path)
    for key in sorted(set(code) - set(doc), key=lambda k: (k[1], k[0])):
        problems.append("%s %s is served by the daemon (%s) but missing from %s"
                        % (key[0].upper(), key[1].replace("{}", "{param}"), code[key], yaml_path))
    for key in sorted(set(doc) - set(code), key=lambda k: (k[1], k[0])):
        problems.append("%s %s is in %s but the daemon has no such route (daemon/api.c, "
                        "daemon/api_write.c)" % (key[0].upper(), doc[key][0], yaml_path))
    for (m, _), (p, op) in sorted(doc.items()):
        if m in ("post", "put", "delete", "patch") and not has_bearer(op):
            problems.append("%s %s: a write without 'security: [bearerAuth]' in %s" % (m.upper(), p, yaml_path))
    if problems:
        print("openapi_check: docs/openapi.yaml and the daemon's routes disagree:", file=sys.stderr)
        for p in problems:
            print("  - " + p, file=sys.stderr)
        return 1
    print("openapi_check: %d operations on %d paths agree with daemon/api.c and daemon/api_write.c"
          % (len(code), len({p for _, p in code})))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
