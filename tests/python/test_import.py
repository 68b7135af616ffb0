"""`import zinf` ahead of `import torch`: libzinf loads NCCL only when it first calls it,
so PyTorch still finds its own NCCL (the toolkit's, loaded first under the same soname,
lacked symbols PyTorch needs and broke its import)."""
import subprocess
import sys


def test_zinf_then_torch():
    r = subprocess.run([sys.executable, "-c", "import zinf, zinf.aio; import torch; torch.zeros(1)"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
