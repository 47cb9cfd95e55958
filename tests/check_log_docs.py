#!/usr/bin/env python3
"""check_log_docs.py - every warning and error the daemon logs has a line in
docs/troubleshooting.md.

Reads the daemon's sources (fs/, sync/, cache/) and collects each message
it can log at level warn or error: the literal first argument of
log_warn/log_error, of log_event with a WARN or ERROR level, the messages
defined as *MSG* macros (the sync's decisions, logged through a table) and
the literals given to sync/listing.c's warn_once.  A message with printf
conversions is checked piece by piece (the text between them).  Each piece
of 12 characters or more must appear in the troubleshooting page, compared
with its whitespace folded and its backquotes dropped.

A log call whose message is a variable (not a *MSG* macro) cannot be
checked that way: the ones known (their messages come from the macros
above, or are libfuse's own) are listed in VARIABLE_SITES, and a new one
fails the check until it is added there with the source of its messages.

Usage: check_log_docs.py SOURCE_DIR.  Exit 0 when every message is
documented, 1 with the missing ones on stderr, 2 on bad usage.
"""
import glob
import os
import re
import sys

# (file, the message argument): where a log call's message is a variable.
VARIABLE_SITES = {
    ("sync/listing.c", "msg"),      # warn_once: its callers' literals, checked
    ("sync/cycle.c", "msg"),        # REC_MSG_DELETE_CAP, checked as a macro
    ("sync/push.c", "res.msg"),     # REC_MSG_* of sync/reconcile.h
    ("sync/plan.c", "o->msg"),      # REC_MSG_* of sync/reconcile.h
    ("fs/fsmount.c", "msg"),        # libfuse's own lines (source=libfuse)
    ("cache/log.c", "msg"),         # the logger itself
    ("cache/log.h", "__VA_ARGS__"), # its log_warn/log_error/... macros
}

STRINGS = r'((?:"(?:[^"\\]|\\.)*"\s*(?:\\\s*)?)+)'
PATTERNS = [
    ("call", re.compile(r'\blog_(?:warn|error)\s*\(\s*' + STRINGS, re.S)),
    ("event", re.compile(r'\blog_event\s*\(([^,;]*),\s*' + STRINGS, re.S)),
    ("macro", re.compile(r'#define\s+\w*MSG\w*\s*\\?\s*' + STRINGS, re.S)),
    ("warn_once", re.compile(r'\bwarn_once\s*\(\s*\w+\s*,\s*' + STRINGS, re.S)),
]
VARIABLE = re.compile(r'\blog_(?:warn|error)\s*\(\s*([A-Za-z_][\w.>-]*)\s*,'
                      r'|\blog_event\s*\([^,;]*,\s*([A-Za-z_][\w.>-]*)\s*,')
CONVERSION = re.compile(r'%[-+ #0-9.]*(?:hh|h|ll|l|z|j|t)?[sdiufxXcp]')


def literal(group):
    """The C string literals of group, concatenated, escapes of quotes undone."""
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', group)).replace('\\"', '"')


def folded(text):
    return re.sub(r"\s+", " ", text).replace("`", "")


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: check_log_docs.py SOURCE_DIR", file=sys.stderr)
        return 2
    root = argv[1]
    with open(os.path.join(root, "docs", "troubleshooting.md"), encoding="utf-8") as f:
        doc = folded(f.read())
    missing, unknown, seen = [], [], 0
    for d in ("fs", "sync", "cache"):
        for path in sorted(glob.glob(os.path.join(root, d, "*.[ch]"))):
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                src = f.read()
            for kind, pat in PATTERNS:
                for m in pat.finditer(src):
                    if kind == "event" and not re.search(r"WARN|ERR", m.group(1)):
                        continue
                    seen += 1
                    for piece in CONVERSION.split(literal(m.group(m.lastindex))):
                        piece = folded(piece).strip(" ;:,")
                        if len(piece) >= 12 and piece not in doc:
                            missing.append((rel, piece))
            for m in VARIABLE.finditer(src):
                arg = m.group(1) or m.group(2)
                # A level, or a *MSG* macro: its definition is checked above.
                if arg.startswith("LOG_LVL") or re.fullmatch(r"[A-Z_]*MSG[A-Z_]*", arg):
                    continue
                if (rel, arg) not in VARIABLE_SITES:
                    unknown.append((rel, arg))
    if seen < 50:
        print(f"check_log_docs: only {seen} messages found under {root}: "
              "the patterns no longer match the sources", file=sys.stderr)
        return 1
    for rel, piece in missing:
        print(f"{rel}: logged, not in docs/troubleshooting.md: {piece}", file=sys.stderr)
    for rel, arg in unknown:
        print(f"{rel}: a log call whose message is the variable '{arg}': document its "
              "messages and add the site to VARIABLE_SITES in tests/check_log_docs.py",
              file=sys.stderr)
    if missing or unknown:
        return 1
    print(f"check_log_docs: {seen} logged messages, each in docs/troubleshooting.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
