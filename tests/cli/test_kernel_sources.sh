#!/usr/bin/env bash
# gpu/cuda's kernels name their shared objects for the CUDA emulation: every __shared__
# declaration is followed, before the next statement, by SHARED_FRESH naming each
# object it declares (a run of declarations by one SHARED_FRESH naming them all), so
# that the emulation starts each block's shared memory undefined, as a GPU does
# (tests/cuda_emu, cuda_emu::shared_fresh). An object left out would keep the block
# before's contents and could hide a race.
# timeout: 10 san=10 cuda-emu=10
set -u
python3 - gpu/cuda/*.cu gpu/cuda/*.h <<'PY'
import re, sys

decl = re.compile(r"^\s*__shared__\s+[\w:<>, ]+?\s+(\w+\s*(\[[^\]]*\])*(\s*,\s*\w+\s*(\[[^\]]*\])*)*)\s*;")
bad, seen = [], 0
for path in sys.argv[1:]:
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        m = decl.match(lines[i])
        if not m:
            i += 1
            continue
        names, first = [], i
        while i < len(lines) and (m := decl.match(lines[i])):
            names += [re.match(r"\s*(\w+)", d).group(1) for d in re.sub(r"\[[^\]]*\]", "", m.group(1)).split(",")]
            i += 1
        seen += len(names)
        mark = re.match(r"^\s*SHARED_FRESH\(([^)]*)\);", lines[i] if i < len(lines) else "")
        marked = {n.strip() for n in mark.group(1).split(",")} if mark else set()
        if set(names) - marked:
            bad.append(f"{path}:{first + 1}: {', '.join(sorted(set(names) - marked))} not named by a SHARED_FRESH right after")
if seen == 0:
    sys.exit("FAIL: no __shared__ declaration found in gpu/cuda: the check read nothing")
for b in bad:
    print("FAIL:", b)
if bad:
    sys.exit(1)
print(f"kernel sources: {seen} shared objects, each named by SHARED_FRESH")
PY
