"""`zinf train --json` on a config with --set overrides, for the tests that hold Python's
figures to the CLI's: its step lines and its final line."""
import json
import subprocess

from zinf._lib import CLI_PATH


def zinf_train(config, sets, *args):
    argv = [CLI_PATH, "train", config, "--json", *args]
    for k, v in sets.items():
        argv += ["--set", f"{k}={v}"]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(l) for l in r.stdout.splitlines()]
    return [l for l in lines if "step" in l and not l.get("final")], lines[-1]
