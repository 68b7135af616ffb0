#!/usr/bin/env python3
"""The table of tests/bench/gpu_checks.sh --variants: each op of each model under every
build, from the device-bench --shapes --json runs in DIR (files VARIANT-MODEL-REP.json,
one JSON object a line: an op's "op", "seconds" and "shape", then the "total" line with
"pass_seconds" and "issue_seconds"). Prints, per model, one row per op (the products summed
as "products"), the pass and the host's time issuing it ("host issue"), one column per build: the fastest and slowest of its runs in ms."""
import collections
import glob
import json
import os
import re
import sys


def read(path):
    """{op: seconds} of one run: the products summed, the pass from the total line."""
    ops = collections.defaultdict(float)
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if rec.get("total"):
                ops["pass"] = rec["pass_seconds"]
                if "issue_seconds" in rec:  # builds before it have no such figure
                    ops["host issue"] = rec["issue_seconds"]
            else:
                ops["products" if rec["op"] == "gemm" else rec["op"]] += rec["seconds"]
    return ops


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gpu_variants.py DIR")
    runs = collections.defaultdict(lambda: collections.defaultdict(list))  # model -> variant -> [ops]
    variants = []
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
        m = re.fullmatch(r"(.+)-(gpt2|llama-1b)-(\d+)\.json", os.path.basename(path))
        if not m:
            continue
        ops = read(path)
        if not ops:
            print(f"gpu_variants: {path} has no ops (see its .log)")
            continue
        runs[m.group(2)][m.group(1)].append(ops)
        if m.group(1) not in variants:
            variants.append(m.group(1))
    if not runs:
        sys.exit(f"gpu_variants: no device-bench runs in {sys.argv[1]}")
    for model, by_variant in sorted(runs.items()):
        names = sorted({op for rs in by_variant.values() for r in rs for op in r},
                       key=lambda op: (op in ("pass", "host issue"), op == "host issue", op != "products", op))
        print(f"\n{model}: ms, fastest-slowest of each build's runs")
        print(f"{'op':18s}" + "".join(f"{v:>18s}" for v in variants))
        for op in names:
            cells = []
            for v in variants:
                t = [r[op] * 1e3 for r in by_variant.get(v, []) if op in r]
                cells.append(f"{min(t):.3f}-{max(t):.3f}" if t else "-")
            print(f"{op:18s}" + "".join(f"{c:>18s}" for c in cells))


if __name__ == "__main__":
    main()
