import subprocess
import sys


def test_policy_layer_imports_neither_torch_nor_simpy():
    """Both executors drive these objects; the real backend must not need simpy, nor the simulator torch."""
    code = ("import sys, tltsim.policy; "
            "print(sorted(m for m in ('torch', 'simpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
