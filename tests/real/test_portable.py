"""Records that travel: a run records the package's own files relative to the package and reads them so from any
directory, and no shipped run names a directory of the machine that made it."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from real.drafters import resolve
from real.models.hub import resolve_model
from real.run.config import RunConfig
from tltsim.core.errors import TltsimError
from real.settings import ASSETS, PACKAGE_ROOT, SHIPPED_TARGET, packaged, recorded, same_path
from tltsim.trace import load

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "traces" / "runs"
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|Users|tmp|check|mnt|data)/")  # where a machine keeps runs


def test_the_package_s_own_files_are_recorded_relative_to_it_and_read_so_from_anywhere(tmp_path, monkeypatch):
    assert recorded(SHIPPED_TARGET) == "real/assets/gcd-tiny-llama" == RunConfig().model
    assert recorded("smollm2-135m") == "smollm2-135m" and recorded(tmp_path) == str(tmp_path)  # others as given
    monkeypatch.chdir(tmp_path)  # a directory with no real/ in it
    assert Path(resolve_model("real/assets/gcd-tiny-llama")) == PACKAGE_ROOT / "real/assets/gcd-tiny-llama"
    assert recorded("../" * 12 + str(SHIPPED_TARGET).lstrip("/")) == "real/assets/gcd-tiny-llama"
    assert resolve("real/assets/smollm2-135m-drafter.pt") == ("checkpoint", ASSETS / "smollm2-135m-drafter.pt")
    assert same_path("real/assets/gcd-tiny-llama", SHIPPED_TARGET) and not same_path("real/assets", SHIPPED_TARGET)
    (tmp_path / "real").mkdir()  # a user's own real/ in the working directory is theirs
    assert packaged("real") == "real" and packaged("real/assets/gcd-tiny-llama") == PACKAGE_ROOT / "real/assets/gcd-tiny-llama"


def test_answers_recorded_on_the_shipped_target_are_accepted_from_another_directory(tmp_path, monkeypatch):
    """A run on the shipped target records it relative to the package; its answers, read from another directory,
    are accepted for a run on the shipped target, given by default or as the absolute path, and for no other."""
    run = tmp_path / "elsewhere" / "run"
    run.mkdir(parents=True)
    config = RunConfig(policy="verl", steps=2, prompts=2, group=2).checked()
    (run / "config.json").write_text(json.dumps(config.to_dict()))  # as the run's rank 0 writes it
    pd.DataFrame({"step": [0] * 4 + [1] * 4, "prompt_id": [0, 0, 1, 1] * 2, "sample": [0, 1] * 4,
                  "tokens": [[5, 6]] * 8}).to_parquet(run / "answers.parquet")
    assert json.loads((run / "config.json").read_text())["model"] == "real/assets/gcd-tiny-llama"
    monkeypatch.chdir(tmp_path)
    same = dict(policy="tlt", steps=2, prompts=2, group=2, answers=str(run))
    for model in (None, str(SHIPPED_TARGET)):
        RunConfig(**same, **({"model": model} if model else {})).checked()
    with pytest.raises(TltsimError, match="its model is 'real/assets/gcd-tiny-llama', this run's 'smollm2-135m'"):
        RunConfig(**same, model="smollm2-135m").checked()


def test_no_shipped_run_names_a_directory_of_the_machine_that_made_it():
    seen = []
    for run in sorted(RUNS.iterdir()):
        texts = {f.name: f.read_text() for f in run.glob("*.json")}
        if (run / "trace.parquet").is_file():
            texts["trace.parquet"] = json.dumps(load(run / "trace.parquet").meta.to_dict())
        seen += [f"{run.name}/{name}" for name, text in texts.items() if MACHINE_PATH.search(text)]
    assert not seen


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_no_tracked_record_holds_an_absolute_path():
    files = subprocess.run(["git", "ls-files", "traces", "notebooks"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    hits = [f for f in files if f.endswith((".json", ".ipynb", ".md", ".csv"))
            and MACHINE_PATH.search((ROOT / f).read_text(errors="replace"))]
    assert not hits


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout: nothing to clone")
def test_a_fresh_clone_elsewhere_replays_a_shipped_runs_answers(tmp_path):
    """`git clone` of this repository into another directory: a run there with --answers of a shipped run is
    accepted, as in the checkout that made it (SmolLM2 from the model cache the suite fetches)."""
    import os
    import sys

    clone = tmp_path / "elsewhere"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    check = ("import json; from real.run.config import RunConfig; from real.settings import GRPOConfig; "
             "c = json.load(open('traces/runs/real_verl_smollm2_longtail/config.json')); "
             "keep = ('model', 'task', 'seed', 'prompts', 'group', 'max_new_tokens', 'greedy', 'temperature'); "
             "RunConfig(policy='tlt', steps=1, answers='traces/runs/real_verl_smollm2_longtail', grpo=GRPOConfig(**c['grpo']), "
             "**{k: c[k] for k in keep if k in c}).checked(); print('accepted')")
    done = subprocess.run([sys.executable, "-c", check], cwd=clone, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(clone)})  # the model cache as the suite's
    assert done.returncode == 0 and done.stdout.strip() == "accepted", done.stderr


def test_no_shipped_drafter_names_a_directory_of_the_machine_that_made_it():
    import torch

    for f in sorted(ASSETS.glob("*.pt")):
        meta = torch.load(f, weights_only=True, map_location="cpu")["meta"]
        assert not MACHINE_PATH.search(json.dumps(meta)), f.name
