"""The runs the GPU benches (gpu_peers.py, gpu_compute.py) make: a peer's worker in a process
of its own, and `zinf train --json` with its log echoed to stderr, its step lines parsed and
the steps after the untimed ones timed."""
import json
import os
import signal
import statistics
import subprocess
import sys
import time


def worker(script, name, args, failed, extra=()):
    """Runs SCRIPT --worker NAME --steps --warmup and the EXTRA arguments in a session of its
    own, so that a timeout ends it and whatever it started (compilers, ninja). Returns its
    last JSON line, or `failed` with the error."""
    cmd = [sys.executable, script, "--worker", name, "--steps", str(args.steps), "--warmup", str(args.warmup),
           *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    print(f"== {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return {**failed, "error": f"timed out after {args.timeout} s"}
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    how = f"killed by signal {-p.returncode}" if p.returncode < 0 else f"exited {p.returncode}"
    return {**failed, "error": f"worker {how} without a result (see the log)"}


def train(exe, cfg, steps, skipped, name, tmp, timeout, sets=()):
    """Runs zinf train CONFIG --json --steps STEPS with --set for each of `sets`. Returns
    (timed, final): the step lines after the first `skipped` and the final line, or
    (error, None) where it cannot."""
    cmd = [exe, "train", cfg, "--json", "--steps", str(steps), *(a for kv in sets for a in ("--set", kv))]
    print(f"== {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    err = os.path.join(tmp, f"{name}.err")
    try:
        with open(err, "w") as ef:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=ef, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout} s", None
    finally:
        if os.path.exists(err):
            sys.stderr.write(open(err, errors="replace").read())
            sys.stderr.flush()
    if p.returncode != 0:
        tail = [l for l in open(err, errors="replace").read().splitlines() if l.strip()]
        fit = [l for l in tail if "does not fit" in l]
        why = (fit or tail or [""])[-1].strip()[:300]
        return f"zinf train exited {p.returncode}: {why}", None
    objs = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    per_step = [o for o in objs if "step" in o and not o.get("final")]
    timed = per_step[skipped:]
    if not timed:
        return f"zinf printed {len(per_step)} steps, none after the first {skipped}", None
    return timed, next((o for o in objs if o.get("final")), {})


def predicted(exe, cfg, timeout, sets=()):
    """zinf estimate --time --measure's plan row for cfg (with --set for each of `sets`) on
    this machine (its step_seconds,
    partition_numel, optimizer_device_numel...; this GPU is taken as the simulated card its
    sim key names: an H100 by default), or None where it cannot.
    The drives' rates are given (the rows on nvme need them; cfg's own row does not)."""
    cmd = [exe, "estimate", "--config", cfg, "--time", "--measure", "--nvme-read", "1", "--nvme-write", "1", "--json",
           *(a for kv in sets for a in ("--set", kv))]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    mine = [r for r in rows if r.get("plan") and "step_seconds" in r]
    return mine[0] if p.returncode == 0 and mine else None


def figures(timed, final, skipped, tokens):
    """A zinf run's figures: the median of the timed steps, each of them, tokens/s for
    `tokens` a step, the median of the forward's waits for the update under it, the
    device's peak and the final loss where it printed them."""
    times = [o["step_seconds"] for o in timed]
    s = statistics.median(times)
    out = {"tokens_per_s": tokens / s, "step_s": s, "steps_s": times, "warmup": skipped,
           "wait_optim_s": statistics.median(o.get("wait_optim_s", 0.0) for o in timed),
           "gpu_peak_gib": final["device_peak_bytes"] / 2**30 if "device_peak_bytes" in final else None}
    if final.get("loss") is not None:
        out["final_loss"] = final["loss"]
    return out


def machine(root):
    """The GPU, the cores, the commit and the date, for the table's first line."""
    def sh(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    gpu = sh("nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader").splitlines()
    return {"gpu": gpu[0] if gpu else "no GPU seen", "cores": os.cpu_count(),
            "commit": sh("git", "describe", "--always", "--dirty") or "?", "date": time.strftime("%Y-%m-%d")}


def cpu_update_s(exe, params, timeout):
    """zinf adam-bench's seconds for one AdamW step over `params` fp32 elements with fp32
    gradients and the bf16 copy, on the optimizer's default threads: the CPU's floor for
    an offloaded step that updates them all. None where it cannot run."""
    cmd = [exe, "adam-bench", "--params", str(params), "--steps", "5", "--json"]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return rows[-1]["seconds"] if p.returncode == 0 and rows else None
