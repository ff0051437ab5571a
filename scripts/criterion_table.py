#!/usr/bin/env python3
"""Print criterion results (target/criterion/**/new/estimates.json) as a markdown table.

Rows are benchmark groups, columns are the functions in them; each cell is the median time
per iteration. With --ratio NAME, a column giving each function's time relative to NAME is
added for the other functions (e.g. --ratio libsrtp2). Usage:
    scripts/criterion_table.py [--prefix GROUP_PREFIX] [--ratio NAME] [--dir target/criterion]
"""
import argparse
import json
import os
import sys


def fmt(ns):
    return f"{ns:,.0f} ns" if ns >= 100 else f"{ns:.1f} ns"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="target/criterion")
    ap.add_argument("--prefix", default="")
    ap.add_argument("--ratio", default=None)
    a = ap.parse_args()
    groups = {}
    for root, _dirs, files in os.walk(a.dir):
        if "benchmark.json" in files and os.path.basename(root) == "new":
            with open(os.path.join(root, "benchmark.json")) as f:
                meta = json.load(f)
            with open(os.path.join(root, "estimates.json")) as f:
                est = json.load(f)
            g, fn = meta["group_id"], meta["function_id"] or meta.get("value_str") or ""
            if not g.startswith(a.prefix):
                continue
            groups.setdefault(g, {})[fn] = est["median"]["point_estimate"]
    if not groups:
        sys.exit(f"no criterion results under {a.dir} with prefix '{a.prefix}'")
    cols = []
    for g in groups.values():
        for fn in g:
            if fn not in cols:
                cols.append(fn)
    head = ["group"] + cols
    if a.ratio:
        head += [f"{c} / {a.ratio}" for c in cols if c != a.ratio]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in sorted(groups):
        g = groups[name]
        row = [name] + [fmt(g[c]) if c in g else "–" for c in cols]
        if a.ratio:
            base = g.get(a.ratio)
            for c in cols:
                if c == a.ratio:
                    continue
                row.append(f"{g[c] / base:.2f}×" if base and c in g else "–")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
