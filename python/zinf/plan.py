"""The zinf CLI's planner and config validator as functions: each runs the zinf program
beside libzinf (`zinf estimate --json`, `zinf check`), so the answers are the CLI's own,
and returns its output as Python objects."""
import json
import os
import subprocess
import tempfile

from ._lib import CLI_PATH, ZinfError


def _run(cmd, config, args, set):
    """Run `zinf cmd` on config (a path, or a dict written to a temporary file) with
    --set for each of set's keys; its stdout, or ZinfError with its message."""
    given = None
    with tempfile.TemporaryDirectory() as tmp:
        if isinstance(config, dict):
            given = os.path.join(tmp, "config.json")
            with open(given, "w") as f:
                json.dump(config, f)
            config = given
        argv = [CLI_PATH, cmd] + (["--config", os.fspath(config)] if cmd == "estimate" and config else
                                  [os.fspath(config)] if config else []) + args
        for k, v in (set or {}).items():
            argv += ["--set", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
        r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        msg = lines[-1] if lines else f"zinf {cmd} exited {r.returncode}"
        raise ZinfError(msg.replace(given, "the config dict") if given else msg)
    return r.stdout


def estimate(config=None, *, params=None, gpus_per_node=None, nodes=None, set=None, time=False, gpu=None):
    """`zinf estimate --json`: the memory (and with time=True the step time) of every
    ZeRO stage and offload choice, for config (a path or a dict) or a GPT-2-like model of
    params parameters. Returns {"rows": [one dict per row], "plan": the config's plan
    (None with params)}. Bad input raises ZinfError with zinf's message."""
    if (config is None) == (params is None):
        raise ZinfError("zinf.estimate: give a config or params, not both or neither")
    args = ["--json"] + (["--params", str(params)] if params is not None else [])
    args += ["--gpus-per-node", str(gpus_per_node)] if gpus_per_node else []
    args += ["--nodes", str(nodes)] if nodes else []
    args += (["--time"] + (["--gpu", gpu] if gpu else [])) if time else []
    objs = [json.loads(l) for l in _run("estimate", config, args, set).splitlines() if l.startswith("{")]
    plans = [o for o in objs if o.get("plan")]
    return {"rows": [o for o in objs if not o.get("plan")], "plan": plans[0] if plans else None}


def check_config(config, *, world_size=None, set=None):
    """`zinf check`: config (a path or a dict) validated and normalized, every default
    filled in, as a dict. An invalid config raises ZinfError naming the key and what
    to do."""
    args = ["--world-size", str(world_size)] if world_size else []
    return json.loads(_run("check", config, args, set))
