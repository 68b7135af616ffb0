#!/usr/bin/env bash
# The engine's files call one another in layers: no circle of calls inside
# runtime/engine/ joins more than three files, so that a part can be read with at most
# two others beside it. Read from the built objects (nm): file A calls file B when A
# uses a symbol B defines. A circle that grows past three is printed with its calls.
# timeout: 10 san=10 cuda-emu=10
set -u
objdir=${ZINF_BUILD:-build}/obj/runtime/engine
ls "$objdir"/*.o > /dev/null 2>&1 || { echo "FAIL: no objects in $objdir"; exit 1; }
python3 - "$objdir" <<'EOF'
import os, subprocess, sys

objdir = sys.argv[1]
defines, uses = {}, {}
for name in sorted(os.listdir(objdir)):
    if not name.endswith(".o"):
        continue
    out = subprocess.run(["nm", os.path.join(objdir, name)], capture_output=True, text=True, check=True).stdout
    f = name[:-2]
    defines[f] = {p[2] for p in map(str.split, out.splitlines()) if len(p) == 3 and p[1] in "TDBR"}
    uses[f] = {p[1] for p in map(str.split, out.splitlines()) if len(p) == 2 and p[0] == "U"}
owner = {sym: f for f, syms in defines.items() for sym in syms}
calls = {f: sorted({owner[s] for s in uses[f] if s in owner and owner[s] != f}) for f in defines}

# A check that reads nothing passes anything: the step calls the coordinator, and the
# plan the gathers.
for a, b in (("step", "coordinator"), ("plan", "zeropp")):
    if b not in calls.get(a, []):
        sys.exit(f"FAIL: {a}.o does not call {b}.o: the objects were not read")

# Tarjan's strongly connected components: each is one circle of files (or one file).
index, low, stack, on_stack, circles = {}, {}, [], set(), []
def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in calls[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        circle = []
        while True:
            w = stack.pop()
            on_stack.discard(w)
            circle.append(w)
            if w == v:
                break
        circles.append(sorted(circle))
for f in calls:
    if f not in index:
        visit(f)

too_big = [c for c in circles if len(c) > 3]
for c in too_big:
    print(f"FAIL: {len(c)} files of runtime/engine/ call one another in a circle: {' '.join(c)}")
    for f in c:
        inside = [g for g in calls[f] if g in c]
        syms = sorted(s for s in uses[f] if owner.get(s) in inside)
        print(f"  {f}.c calls {', '.join(inside)}: {' '.join(syms)}")
if too_big:
    sys.exit(1)
print("test_engine_calls: circles:", ", ".join("+".join(c) for c in circles if len(c) > 1) or "none")
print("test_engine_calls: all checks passed")
EOF
