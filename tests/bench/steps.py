"""What the benches read from `zinf train --json`: a run's step lines and final line,
medians over the steps after the first few, and where an offloaded step's time went.
The bench scripts import it with their own directory on PYTHONPATH."""
import json
import statistics


def load(path):
    """The step lines and the final line of one run's --json output."""
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    return [r for r in rows if not r.get("final")], next(r for r in rows if r.get("final"))


def med(rows, key, skip):
    """The median of key over the steps after the first skip; None where no step has it."""
    v = [r[key] for r in rows[skip:] if key in r]
    return statistics.median(v) if v else None


def print_where(rows, skip, name="nvme"):
    """The waits, the background update and the NVMe link's bytes and busy time per step."""
    f = lambda x, fmt: "n/a" if x is None else fmt % x  # noqa: E731
    m = lambda key: med(rows, key, skip)  # noqa: E731
    print(f"{name} run, per step (medians):")
    print("%14s %9s %16s %17s" % ("wait_params s", "optim s", "optim io wait s", "wait optim s"))
    print("%14s %9s %16s %17s" % (f(m("wait_params_s"), "%.3f"), f(m("optim_s"), "%.3f"),
                                  f(m("optim_io_wait_s"), "%.3f"), f(m("wait_optim_s"), "%.3f")))
    print("%-6s %9s %8s %8s" % ("nvme", "GB", "busy s", "GB/s"))
    for op in ("read", "write"):
        b, s = m(f"nvme_{op}_bytes"), m(f"nvme_{op}_s")
        print("%-6s %9s %8s %8s" % (op, f(None if b is None else b / 1e9, "%.3f"), f(s, "%.3f"),
                                    f(b / s / 1e9 if b is not None and s else None, "%.3f")))
