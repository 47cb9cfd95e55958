#!/usr/bin/env python3
"""check_log_docs.py - every warning and error the daemon logs has a line in
docs/troubleshooting.md.

Reads the daemon's sources (fs/, sync/, cache/) and accounts for every call
of log_warn, log_error, log_event and log_msgf (cache/log.h):

- a call at level info or debug (log_info, log_debug, or a literal
  LOG_LVL_INFO / LOG_LVL_DEBUG) is left alone;
- any other call whose message is a string literal, or a *MSG* macro, has
  its message checked: each piece of it between printf conversions, of 12
  characters or more, must appear in the troubleshooting page (compared
  with whitespace folded and backquotes dropped).  Every *MSG* macro is
  checked, whatever the level its users log it at, as are the literals
  given to sync/listing.c's warn_once;
- a call whose message is anything else (a variable, an expression) cannot
  be checked: VARIABLE_SITES says how many such calls each file has and
  where their messages come from (the macros above, libfuse's own lines),
  and a new one fails the check until it is counted there.

Each kind of message must be found a plausible number of times, so a
pattern that stops matching the sources fails the check instead of
passing it.

Usage: check_log_docs.py SOURCE_DIR.  Exit 0 when every message is
documented, 1 with what is missing on stderr, 2 on bad usage.
"""
import glob
import os
import re
import sys

# (file, the message argument): the calls whose message is a variable, how
# many of them, and where their messages come from.
VARIABLE_SITES = {
    ("sync/listing.c", "msg"): 1,    # warn_once: its callers' literals, checked
    ("sync/cycle.c", "msg"): 1,      # REC_MSG_DELETE_CAP, a *MSG* macro
    ("sync/push.c", "res.msg"): 1,   # REC_MSG_* of sync/reconcile.h
    ("sync/plan.c", "o->msg"): 1,    # REC_MSG_* of sync/reconcile.h
    ("fs/fsmount.c", "msg"): 1,      # libfuse's own lines (source=libfuse)
    ("cache/log.c", "msg"): 1,       # the logger itself (log_msgf)
}

# The fewest of each kind the sources hold (far below today's counts).
MINIMUM = {"literal": 60, "macro": 15, "warn_once": 4}

STRING = r'"(?:[^"\\]|\\.)*"'
STRINGS = r'((?:' + STRING + r'\s*)+)'
CALL = re.compile(r'\blog_(warn|error|event|msgf|info|debug)\s*\(')
MACRO_DEF = re.compile(r'#define\s+(\w*MSG\w*)\s*\\?\s*' + STRINGS, re.S)
WARN_ONCE = re.compile(r'\bwarn_once\s*\(\s*\w+\s*,\s*' + STRINGS, re.S)
CONVERSION = re.compile(r'%[-+ #0-9.]*(?:hh|h|ll|l|z|j|t)?[sdiufxXcp]')


def literal(group):
    """The C string literals of group, concatenated, escapes of quotes undone."""
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', group)).replace('\\"', '"')


def folded(text):
    return re.sub(r"\s+", " ", text).replace("`", "")


def arguments(src, start):
    """The top-level arguments of the call whose '(' is at src[start - 1]."""
    args, depth, i, cur = [], 0, start, start
    while i < len(src):
        c = src[i]
        if c == '"':
            i += len(re.match(STRING, src[i:]).group(0))
            continue
        if c == "'":
            i += len(re.match(r"'(?:[^'\\]|\\.)*'", src[i:]).group(0))
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append(src[cur:i].strip())
                return args
            depth -= 1
        elif c == "," and depth == 0:
            args.append(src[cur:i].strip())
            cur = i + 1
        i += 1
    return args


def missing_pieces(text, doc):
    out = []
    for piece in CONVERSION.split(text):
        piece = folded(piece).strip(" ;:,")
        if len(piece) >= 12 and piece not in doc:
            out.append(piece)
    return out


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: check_log_docs.py SOURCE_DIR", file=sys.stderr)
        return 2
    root = argv[1]
    with open(os.path.join(root, "docs", "troubleshooting.md"), encoding="utf-8") as f:
        doc = folded(f.read())
    seen = {k: 0 for k in MINIMUM}
    missing, unknown, variable = [], [], {}
    for d in ("fs", "sync", "cache"):
        for path in sorted(glob.glob(os.path.join(root, d, "*.[ch]"))):
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                src = f.read()
            for m in MACRO_DEF.finditer(src):
                seen["macro"] += 1
                missing += [(rel, p) for p in missing_pieces(literal(m.group(2)), doc)]
            for m in WARN_ONCE.finditer(src):
                seen["warn_once"] += 1
                missing += [(rel, p) for p in missing_pieces(literal(m.group(1)), doc)]
            for m in CALL.finditer(src):
                kind = m.group(1)
                if kind in ("info", "debug"):
                    continue
                # The macros' own definitions (#define log_warn(...) ...).
                if src[src.rfind("\n", 0, m.start()) + 1:m.start()].lstrip().startswith("#"):
                    continue
                args = arguments(src, m.end())
                if args and args[0].startswith("enum log_level "):
                    continue  # the function's own declaration or definition
                if kind in ("event", "msgf"):
                    if not args or args[0] in ("LOG_LVL_INFO", "LOG_LVL_DEBUG"):
                        continue
                    args = args[1:]
                msg = args[0] if args else ""
                if re.fullmatch(r'(?:' + STRING + r'\s*)+', msg):
                    seen["literal"] += 1
                    missing += [(rel, p) for p in missing_pieces(literal(msg), doc)]
                elif re.fullmatch(r"[A-Z_]*MSG[A-Z_]*", msg):
                    pass  # its #define is checked above
                else:
                    variable[(rel, msg)] = variable.get((rel, msg), 0) + 1
    for site, n in sorted(variable.items()):
        if VARIABLE_SITES.get(site) != n:
            unknown.append((site, n))
    for site in sorted(set(VARIABLE_SITES) - set(variable)):
        unknown.append((site, 0))
    few = [k for k in MINIMUM if seen[k] < MINIMUM[k]]
    for k in few:
        print(f"check_log_docs: only {seen[k]} messages of kind {k} found under {root} "
              f"(at least {MINIMUM[k]} expected): its pattern no longer matches the sources",
              file=sys.stderr)
    for rel, piece in missing:
        print(f"{rel}: logged, not in docs/troubleshooting.md: {piece}", file=sys.stderr)
    for (rel, arg), n in unknown:
        print(f"{rel}: {n} log call(s) whose message is '{arg}', where VARIABLE_SITES in "
              f"tests/check_log_docs.py counts {VARIABLE_SITES.get((rel, arg), 0)}: document "
              "their messages and count them there", file=sys.stderr)
    if few or missing or unknown:
        return 1
    print(f"check_log_docs: {sum(seen.values())} logged messages, each in "
          "docs/troubleshooting.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
