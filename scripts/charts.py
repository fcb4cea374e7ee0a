#!/usr/bin/env python3
"""Draws one SVG chart per component from the newest file of each benchmark
in bench/results/ into docs/charts/ (scripts/dev charts; the README shows
them). Needs matplotlib (Debian: python3-matplotlib).

A results file is markdown: a title, then `## section` headings, each with a
table. Each table is drawn as horizontal bars, one subplot per table: the
columns whose header names a unit (M/s, msg/s, lines/s, us, ...), or whose
cells carry one (stage: "545 ns/item (1.83 M/s)"), grouped when several
share the first one's unit. Tables of targets and ratio columns are left
out. The log's single "result" column mixes units: only its message rates
are drawn. The newest file: the latest date in its name, then the later
commit (git), then the name; files tagged after the date (e.g. .loaded) only
when there is nothing else.

Usage: scripts/charts.py [--results DIR] [--out DIR] [--format svg|png]
"""
import argparse
import os
import re
import subprocess
import sys

COMPONENTS = {  # file prefix -> chart name
    "queue_compare": "queue",
    "batcher_compare": "batcher",
    "stage_compare": "stage",
    "pressure_compare": "redis",
    "log_compare": "log",
    "cli_compare": "cli",
}
UNIT = re.compile(r"(M items/s|MB/s|M/s|msg/s|lines/s|ns/item|\bus\b|\bns\b|\bms\b)")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
NAME = re.compile(r"^(?P<bench>[a-z_]+)\.(?P<commit>[0-9a-f]{6,40})\.(?:.*\.)?(?P<date>\d{8})(?P<tag>\..+)?\.md$")


def number(cell):
    m = NUMBER.search(cell)
    return float(m.group(0).replace(",", "")) if m else None


def split_row(line):
    cells = re.split(r"(?<!\\)\|", line.strip())
    return [c.strip().replace("\\|", "|") for c in cells[1:-1]]


def parse_tables(text):
    """[(heading, header, rows)] for every markdown table in text."""
    tables, heading, i = [], "", 0
    lines = text.splitlines()
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            heading = line.lstrip("#").strip()
        elif line.startswith("# "):
            heading = ""  # the file's title: the chart's title already
        elif line.strip() and not line.startswith(("|", "<!--")):
            heading = line.strip()  # a caption above the next table
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[i + 1].strip()):
            header = split_row(line)
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                row = split_row(lines[i])
                if len(row) == len(header):
                    rows.append(row)
                i += 1
            tables.append((heading, header, rows))
            heading = ""
            continue
        i += 1
    return tables


def series(bench, heading, header, rows):
    """(title, unit, labels, {column: values}) to draw, or None."""
    if heading.lower().startswith(("target", "load average")) or header[0].lower() == "target" or not rows:
        return None
    if bench == "log_compare":  # one mixed column: keep the message rates
        keep = [r for r in rows if number(r[1]) is not None and
                not re.search(r"ratio|MB/s|, us|, ms|per sync", r[0])]
        if not keep:
            return None
        return (heading, "msg/s", [r[0] for r in keep], {header[1]: [number(r[1]) for r in keep]})

    rows = [r for r in rows if any(number(c) is not None for c in r[1:])]  # not "skipped: ..."
    if not rows:
        return None

    def numeric(j):
        return all(number(r[j]) is not None for r in rows)

    def ratio(j):
        return all(r[j].endswith("x") or r[j] == "" for r in rows) or " / " in header[j] or \
            header[j].lower().startswith(("vs", "cpu"))

    cols, unit = [], None
    for j in range(1, len(header)):
        if not numeric(j) or ratio(j):
            continue
        m = UNIT.search(header[j]) or UNIT.search(rows[0][j])
        if not m:
            continue
        if unit is None:
            unit = m.group(1)
        if m.group(1) == unit:
            cols.append(j)
    if not cols:
        return None
    first = cols[0]
    label_cols = [j for j in range(first) if not (numeric(j) and ratio(j))]
    labels = []
    for r in rows:
        parts = []
        for j in label_cols:
            parts.append(r[j] if number(r[j]) is None or len(r[j]) > 4 else f"{header[j]} {r[j]}")
        labels.append(", ".join(p for p in parts if p))
    values = {header[j]: [number(r[j]) for r in rows] for j in cols}
    return (heading, unit, labels, values)


def newest(files, repo):
    def commit_time(c):
        try:
            out = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%ct", c],
                                 capture_output=True, text=True, check=False)
            return int(out.stdout.strip() or 0)
        except OSError:
            return 0
    plain = [f for f in files if not f[1].group("tag")]
    pool = plain or files
    return max(pool, key=lambda f: (f[1].group("date"), commit_time(f[1].group("commit")), f[0]))


def draw(path, name, src, title, charts, fmt="svg"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.hashsalt"] = "sluice"  # stable ids: regenerating changes nothing
    plt.rcParams["font.size"] = 9
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: files 5-10x smaller
    ncols = 2 if len(charts) > 4 else 1  # many tables (queue): two columns
    nrows = (len(charts) + ncols - 1) // ncols
    h = [max(1.8, 0.22 * len(c[2]) * max(1, len(c[3])) + 0.8) for c in charts]
    heights = [max(h[r * ncols:(r + 1) * ncols]) for r in range(nrows)]
    top = 0.7  # inches for the title
    fig, axes = plt.subplots(nrows, ncols, figsize=(9 * ncols, sum(heights) + top),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax in axes.flat[len(charts):]:
        ax.set_visible(False)
    for ax, (heading, unit, labels, values) in zip(axes.flat, charts):
        n = len(values)
        bar = 0.8 / n
        ys = range(len(labels))
        for k, (col, vals) in enumerate(values.items()):
            pos = [y - 0.4 + bar * (k + 0.5) for y in ys]
            colors = None
            if n == 1:  # one series: sluice's own rows stand out
                colors = ["#1f77b4" if re.search(r"sluice|embedded|put|append|batched|group|"
                                                 r"no sync|interval|per-append|Batcher", lab)
                          and not re.search(r"raw|sqlite|redis-benchmark|pipe|naive", lab)
                          else "#bbbbbb" for lab in labels]
            bars = ax.barh(pos, vals, height=bar, color=colors, label=col if n > 1 else None)
            for b, v in zip(bars, vals):
                ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {v:,.3g}" if v < 100 else f" {v:,.0f}",
                        va="center", fontsize=7)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(labels)
        ax.invert_yaxis()
        ax.set_xlabel(unit if n > 1 else f"{next(iter(values))}" if unit in next(iter(values)) else unit)
        vals = [v for vs in values.values() for v in vs if v > 0]
        if vals and max(vals) / max(min(vals), 1e-12) > 200:
            ax.set_xscale("log")
        ax.set_xlim(right=max(vals or [1]) * (3 if ax.get_xscale() == "log" else 1.18))
        ax.set_title(heading, fontsize=9, loc="left")
        if n > 1:
            ax.legend(fontsize=7, loc="best")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{name}: {title}\n{src}", fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 1 - top / (sum(heights) + top)))
    fig.savefig(path, format=fmt, **({"metadata": {"Date": None}} if fmt == "svg" else {"dpi": 80}))
    plt.close(fig)


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join(repo, "bench", "results"))
    ap.add_argument("--out", default=os.path.join(repo, "docs", "charts"))
    ap.add_argument("--format", default="svg", choices=["svg", "png"], help="png: for a quick look")
    args = ap.parse_args()
    by_bench = {}
    for f in sorted(os.listdir(args.results)):
        m = NAME.match(f)
        if m and m.group("bench") in COMPONENTS:
            by_bench.setdefault(m.group("bench"), []).append((f, m))
    os.makedirs(args.out, exist_ok=True)
    status = 0
    for bench, name in COMPONENTS.items():
        if bench not in by_bench:
            print(f"charts: no bench/results/{bench}.*.md: {name}.svg not drawn", file=sys.stderr)
            continue
        f, m = newest(by_bench[bench], repo)
        with open(os.path.join(args.results, f), encoding="utf-8") as fh:
            text = fh.read()
        title = next((l.lstrip("# ").strip() for l in text.splitlines() if l.startswith("# ")), bench)
        charts = [c for t in parse_tables(text) if (c := series(bench, *t))]
        if not charts:
            print(f"charts: {f}: no table to draw", file=sys.stderr)
            status = 1
            continue
        out = os.path.join(args.out, f"{name}.{args.format}")
        draw(out, name, f"bench/results/{f}", title, charts, args.format)
        print(f"{os.path.relpath(out, repo)} <- bench/results/{f} ({len(charts)} tables)")
    return status


if __name__ == "__main__":
    sys.exit(main())
