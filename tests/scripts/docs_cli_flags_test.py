#!/usr/bin/env python3
"""Every `sluice` command line in the docs names a subcommand and flags that
the binary has: each flag must appear in that subcommand's --help (or the
top level's, for the global ones). A doc that shows a flag the command
does not take (renamed, removed, or never there) fails here.

Usage: docs_cli_flags_test.py --sluice PATH [--prose DOC.md] [--other=--FLAG] DOC.md...
Looks at fenced code blocks and inline code spans that hold "sluice ", and
in a --prose doc at every inline code span that starts with a flag.
"""

import argparse
import re
import shlex
import subprocess
import sys

OPERATORS = {"|", "||", "&", "&&", ";", ">", ">>", "<", "2>", "2>&1", "(", ")", "$("}
GLOBAL_WITH_VALUE = {"--store", "--redis"}


def help_of(sluice, words):
    out = subprocess.run([sluice, *words, "--help"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return None
    return out.stdout + out.stderr


def subcommands(help_text):
    names, inside = set(), False
    for line in help_text.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
            continue
        if inside:
            m = re.match(r"  ([a-z][a-z-]*)\s", line)
            if m:
                names.add(m.group(1))
            elif line.strip() and not line.startswith("   "):
                inside = False
    return names


def snippets(path):
    """(line number, text) of each command-like piece of `path`."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            stripped = line.strip()
            if stripped.startswith("```"):
                fence = None if fence is not None else stripped[3:].strip()
                continue
            if fence is not None:
                if fence in ("", "sh", "bash", "console", "shell") and "sluice " in line:
                    yield no, line.rstrip("\n").removeprefix("$ ")
                continue
            for span in re.findall(r"`([^`]+)`", line):
                if "sluice " in span:
                    yield no, span


def tokens(text):
    try:
        lex = shlex.shlex(text, posix=True, punctuation_chars="|&;<>()")
        lex.whitespace_split = True
        return list(lex)
    except ValueError:  # an unbalanced quote in prose: words will do
        return text.split()


def commands(text):
    """(subcommand words, flags) of each `sluice ...` in text."""
    toks = tokens(text)
    for i, t in enumerate(toks):
        if t != "sluice" and not t.endswith("/sluice"):
            continue
        j, words, flags = i + 1, [], []
        while j < len(toks) and toks[j].startswith("-") and toks[j] not in OPERATORS:
            flags.append(toks[j])  # global options come before the subcommand
            j += 2 if toks[j] in GLOBAL_WITH_VALUE else 1
        while j < len(toks) and toks[j] not in OPERATORS:
            # "[--json]": an optional flag
            flags.append(toks[j]) if toks[j].lstrip("[").startswith("-") else words.append(toks[j])
            j += 1
        yield words, flags


def flag_name(tok):
    tok = tok.strip("[],.:;")
    if tok in ("-", "--") or tok.endswith("-") or any(c in tok for c in "*…<>{}"):
        return None  # stdin, a placeholder, or a family of flags ("--from-*")
    if "..." in tok:
        return None
    return tok.split("=", 1)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--prose", action="append", default=[],
                    help="a doc (also listed) whose every inline `--flag` must be one of sluice's")
    ap.add_argument("--other", action="append", default=[],
                    help="a flag of another tool that a --prose doc names (--other=--runs)")
    ap.add_argument("docs", nargs="+")
    args = ap.parse_args()
    top = help_of(args.sluice, [])
    if top is None:
        sys.exit("cannot run " + args.sluice + " --help")
    subs = subcommands(top)
    helps = {(): top}
    bad, checked = [], 0
    for doc in args.docs:
        for no, text in snippets(doc):
            for words, flags in commands(text):
                if not words or words[0] not in subs:
                    if words and re.fullmatch(r"[a-z]+", words[0]) and words[0] not in subs:
                        # "sluice is ..." in prose: only a word right after a
                        # flagged command line counts as a subcommand
                        if flags:
                            bad.append(f"{doc}:{no}: no subcommand '{words[0]}': {text}")
                    continue
                path = (words[0],)
                if words[0] == "log" and len(words) > 1 and words[1] in subcommands(
                        helps.setdefault(path, help_of(args.sluice, list(path)) or "")):
                    path = (words[0], words[1])
                if path not in helps:
                    helps[path] = help_of(args.sluice, list(path)) or ""
                for tok in flags:
                    name = flag_name(tok)
                    if name is None:
                        continue
                    checked += 1
                    pattern = r"(^|[\s,])" + re.escape(name) + r"(?![A-Za-z0-9-])"
                    if not re.search(pattern, helps[path]) and not re.search(pattern, top):
                        bad.append(f"{doc}:{no}: 'sluice {' '.join(path)}' has no {name}: {text}")
    every = "\n".join(h for h in helps.values() if h)
    for word in sorted(subs - {"log"}) + ["log verify", "log inspect"]:
        every += "\n" + (help_of(args.sluice, word.split()) or "")
    for doc in args.prose:
        with open(doc, encoding="utf-8") as f:
            for no, line in enumerate(f, 1):
                for span in re.findall(r"`(--[a-z][a-z0-9-]*)[^`]*`", line):
                    name = flag_name(span)
                    if name is None or name in args.other:
                        continue
                    checked += 1
                    if not re.search(r"(^|[\s,])" + re.escape(name) + r"(?![A-Za-z0-9-])", every):
                        bad.append(f"{doc}:{no}: no sluice command has {name}")
    for b in bad:
        print(b)
    print(f"{checked} flags checked in {len(args.docs)} docs; {len(bad)} wrong")
    sys.exit(1 if bad or checked == 0 else 0)


if __name__ == "__main__":
    main()
