"""Every bad input the CLI can be given: exit 2, one line on stderr, no traceback, nothing a user had changed.

Each case of CASES builds its command line in a fresh copy of one sandbox directory (a user's files and
directories, some named like a result's; damaged copies of a result; bad configs, calibrations, metrics,
traces and verl configs), runs it in this process through `tltsim.cli.main` and checks the line and that the
sandbox is byte for byte as it was. A few run in real processes, and the kill and concurrency cases at the
end fork writers and kill them or race them.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.cli.conftest import CLUSTER, ROOT, start, tltsim
from tltsim.analysis.calibration import FORMAT
from tltsim.cli import main
from tltsim.core.io import exclusive, is_temporary
from tltsim.trace import load, save, synth

SWEEP = ('[base]\ntrace = "{}"\n[base.cluster]\ngpus = 2\ntp = 1\ngpu = "a100"\nmodel = "{}"\n'
         '[grid]\nseed = [0, 1]\n')
FLOATS = ["rl.reward_s", "calibration.rollout", "calibration.other_s", *(f"cost.{k}" for k in (
    "eta_bw", "eta_flops", "iteration_overhead_s", "allreduce_latency_s", "per_token_s", "overlap",
    "draft_overhead_s", "mem_fraction", "train_mfu", "drafter_train_mfu", "sync_fixed_s"))]
NON_FINITE = {"nan": "nan", "inf": "inf", "-inf": "-inf"}  # TOML spellings
KNOBS = ["drift", "q_start", "q_max", "tau_samples", "load_s", "checkpoint_s", "eps", "keep_long_prev", "threshold"]


def _toml_at(key: str, value: str) -> str:
    """A config file setting dotted `key` (section.name or name) to TOML `value`."""
    section, _, name = key.rpartition(".")
    return f"[{section}]\n{name} = {value}\n" if section else f"{name} = {value}\n"


def _files(root: Path, trace: Path) -> None:
    """The bad files of the sandbox."""
    def write(name, text):
        (root / name).write_text(text)

    (root / "bad.toml").write_bytes(b'trace = "t.parquet"\n# caf\xe9 in Latin-1\n')
    (root / "badgpu.toml").write_bytes(b'name = "H100 \xff"\n')
    with open(root / "huge.toml", "wb") as f:  # over the bound on config files (sparse: its size is what counts)
        f.truncate(5_000_000)
    for key in FLOATS:
        for tag, value in NON_FINITE.items():
            write(f"{key}_{tag}.toml", _toml_at(key, value))
    for knob in KNOBS:
        write(f"knob_{knob}.toml", f"[policy_knobs]\n{knob} = nan\n")
    write("seed.toml", "seed = -1\n")
    write("steps.toml", 'steps = "5:2"\n')
    write("unknown.toml", "[cluster]\ngpu_count = 8\n")
    write("typed.toml", '[cluster]\ngpus = "eight"\n')
    write("section.toml", "cluster = 8\n")
    write("bigint.toml", "[cluster]\ngpus = 9223372036854775807\n")
    write("sweep.toml", SWEEP.format(trace, "qwen2.5-7b"))
    write("sweep_too_big.toml", SWEEP.format(trace, "llama-3.3-70b"))
    phases = {"rollout": 1.2, "logprob": 1.0, "train": 1.0, "sync": 1.0, "rollout_fixed_s": 0.0, "other_s": 0.0}

    def calibration(**change):  # a saved calibration (tltsim.analysis.calibration's format) with `change` in it
        return json.dumps({"format": FORMAT, "phases": phases, "reward_s": 1.0, **change})

    for name, factor in {"cal_inf": float("inf"), "cal_nan": float("nan"), "cal_neg": -1, "cal_zero": 0, "cal_str": "2",
                         "cal_bool": True}.items():
        write(f"{name}.json", calibration(phases={**phases, "rollout": factor}))
    write("cal_huge.json", calibration(phases={**phases, "rollout": 1e308}))  # every time would overflow
    write("cal_tiny.json", calibration(phases={**phases, "train": 1e-300}))
    write("cal_fixed.json", calibration(phases={**phases, "other_s": 1e308}))
    write("cal_misspelt.json", calibration(speed_factr=1.3))
    write("cal_phase.json", calibration(phases={**{k: v for k, v in phases.items() if k != "rollout"}, "rollot": 1.2}))
    write("cal_noformat.json", json.dumps({"phases": phases, "reward_s": 1.0}))
    write("cal_cluster.json", calibration(cluster=5))
    write("cal_deep.json", "[" * 100_000 + "]" * 100_000)
    write("cal_text.json", "speed factor 1.3")
    step = '{{"step": {}, "data": {{"timing_s/gen": {}, "timing_s/step": 9.0}}}}\n'
    for name, gen in {"m_huge": "9" * 400, "m_zero": "0.0", "m_neg": "-3.0", "m_nan": "NaN", "m_inf": "Infinity",
                      "m_text": '"fast"'}.items():
        write(f"{name}.jsonl", "".join(step.format(s, gen) for s in range(3)))
    write("m_deep.jsonl", '{"step": 0, "data": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    write("m_list.jsonl", "[1, 2]\n")
    write("m_lens.jsonl", "".join(f'{{"step": {s}, "data": {{"timing_s/gen": 5.0, "response_length/mean": 99999}}}}\n'
                                  for s in range(3)))  # of another run: no step is fitted
    write("m_nodata.jsonl", '{"step": 0}\n')
    write("m_tworuns.jsonl", "".join(step.format(s, 5.0) for s in (1, 2, 3, 1, 2)))  # two runs' files joined
    write("m_step.jsonl", '{"step": -4, "data": {"timing_s/gen": 3.0}}\n')
    write("m_none.jsonl", '{"step": 0, "data": {"timing_s/step": 3.0}}\n')
    write("deep_array.jsonl", "[" * 100_000 + "]" * 100_000 + "\n")
    write("deep_object.jsonl", '{"a":' * 50_000 + "1" + "}" * 50_000 + "\n")
    write("rows.csv", "step,prompt_id,sample,prompt_len,response_len\n0,0,0,10\n")
    write("neg.csv", "step,prompt_id,sample,prompt_len,response_len\n0,0,0,10,-5\n")
    write("frac.csv", "step,prompt_id,sample,prompt_len,response_len\n0,0,0,10,3.5\n")
    write("empty.csv", "")
    write("nolen.csv", "step,prompt_id\n0,0\n")
    write("dup.csv", "step,step,prompt_id,sample,prompt_len,response_len\n0,0,0,0,1,1\n")
    write("latin.jsonl", "")
    (root / "latin.jsonl").write_bytes(b'{"step": 0, "text": "caf\xe9"}\n')
    write("array.jsonl", "[1]\n")
    write("notes.md", "# not a trace\n")
    write("notes.txt", "a user's notes\n")
    write("p2.csv", "kind,batch,context,tokens,sq_tokens,depth,topk,verify,seconds\n"
                    "decode,1,32,1,0,0,0,0,0.01\nprefill,1,32,32,1024,0,0,0,0.02\n")  # no fit in two rows
    write("mine.csv.meta.json", '{"mine": 1}\n')  # a user's file, named as a CSV trace's sidecar
    (root / "figs").mkdir()
    (root / "figs" / "lengths.png").write_bytes(b"\x89PNG\r\n\x1a\n a user's figure\n")  # named as a report's
    write("t.parquet.txt", "")
    (root / "fake.parquet").write_bytes(b"PAR1 not really\n")
    csv = root / "pair.csv"
    save(load(trace), csv)
    meta = json.loads((root / "pair.csv.meta.json").read_text())
    (root / "edited.csv").write_text(csv.read_text() + csv.read_text().splitlines()[-1] + "\n")  # changed since its sidecar
    (root / "edited.csv.meta.json").write_text(json.dumps(meta))
    (root / "pair.csv.meta.json").write_text(json.dumps({**meta, "data_sha256": "0" * 64}))  # another file's sidecar
    verl = {"bomb": _alias_bomb(), "trainer5": "trainer: 5\n", "rollout_list": "actor_rollout_ref: [1, 2]\n",
            "nogpus": "trainer:\n  n_gpus_per_node: -1\n", "textgpus": "trainer:\n  n_gpus_per_node: eight\n",
            "mem": "actor_rollout_ref:\n  rollout:\n    gpu_memory_utilization: 2.5\n",
            "interp": "trainer:\n  n_gpus_per_node: ${nowhere.key}\n", "notyaml": "trainer: [1, 2\n",
            "nosection": "model: {path: x}\n", "yamlnan": "actor_rollout_ref:\n  rollout:\n    gpu_memory_utilization: .nan\n"}
    for name, text in verl.items():
        write(f"verl_{name}.yaml", text)
    with open(root / "verl_huge.yaml", "wb") as f:
        f.truncate(6_000_000)
    (root / "verl_latin.yaml").write_bytes(b"trainer:\n  name: caf\xe9\n")
    dump = root / "dump"
    dump.mkdir()
    (dump / "0.jsonl").write_text('{"input": "q", "output": "a\\ud800b", "score": 1.0, "step": 0}\n')
    (root / "nandump").mkdir()
    (root / "nandump" / "1.jsonl").write_text('{"input": "q", "output": "an answer", "score": NaN, "step": 1}\n')


def _alias_bomb() -> str:
    """YAML whose ten lines expand to 9^10 values: each alias repeats the one before nine times."""
    lines, prev = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]'], "a0"
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [{', '.join(['*' + prev] * 9)}]")
        prev = f"a{i}"
    return "\n".join(lines) + f"\ntrainer:\n  n_gpus_per_node: 8\n  junk: *{prev}\n"


def _flip(path: Path) -> None:  # one bit in the middle: the same size, another sha256
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _scramble(path: Path) -> None:  # the same size, not Parquet any more: its middle third zeroed
    data = bytearray(path.read_bytes())
    third = len(data) // 3
    data[third: 2 * third] = bytes(third)
    path.write_bytes(bytes(data))


def _legacy(d: Path) -> None:  # the manifest an older tltsim wrote: sizes only
    files = json.loads((d / "manifest.json").read_text())["files"]
    (d / "manifest.json").write_text(json.dumps({"files": {n: f["bytes"] for n, f in files.items()}}))


RESULT_FILES = ["timeline.parquet", "steps.parquet", "requests.parquet", "summary.json", "config.json",
                "timeline.perfetto.json"]
DAMAGE = {  # copies of a complete result, each damaged one way
    "truncated_parquet": lambda d: _truncate(d / "timeline.parquet"),
    "scrambled_parquet": lambda d: _scramble(d / "steps.parquet"),
    "truncated_summary": lambda d: _truncate(d / "summary.json"),
    "no_summary": lambda d: (d / "summary.json").unlink(),
    "no_manifest": lambda d: (d / "manifest.json").unlink(),
    "bad_manifest": lambda d: (d / "manifest.json").write_text('{"files": '),
    "legacy_manifest": _legacy,
    "escaping_manifest": lambda d: (d / "manifest.json").write_text(
        (d / "manifest.json").read_text().replace('"config.json"', '"../../file.txt"')),
    **{f"flipped_{n.replace('.', '_')}": (lambda n: lambda d: _flip(d / n))(n) for n in RESULT_FILES},
}
USER_DIRS = {  # a user's directories, some holding what a result holds (by name)
    "userdir": {"notes.txt": "a user's notes\n"},
    "ud_config": {"config.json": '{"mine": 1}\n'},
    "ud_report": {"report.html": "<p>my report</p>\n"},
    "ud_summary": {"sub/summary.json": '{"mine": 1}\n'},
    "ud_manifest": {"manifest.json": '{"files": {}}\n', "thesis.tex": "years of work\n"},
    "ud_runs": {"runs/notes.txt": "mine\n"},
    "ud_csv": {"results.csv": "my,own\n"},
}


@pytest.fixture(scope="session")
def template(tmp_path_factory, tiny, result_dir) -> Path:
    """The sandbox, built once; each case works on a copy."""
    root = tmp_path_factory.mktemp("template") / "sandbox"
    root.mkdir()
    (root / "file.txt").write_text("a user's file\n")
    (root / "dir.csv").mkdir()  # a directory named like a file
    (root / "dir.parquet").mkdir()
    for name, files in USER_DIRS.items():
        for rel, text in files.items():
            (root / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / name / rel).write_text(text)
    shutil.copytree(result_dir, root / "res")
    shutil.copytree(result_dir, root / "res_plus")
    (root / "res_plus" / "my_notes.txt").write_text("added by the user\n")  # a result, and a user's file in it
    results = root / "results"  # the damaged copies, in a directory of their own
    for name, damage in DAMAGE.items():
        shutil.copytree(result_dir, results / name)
        damage(results / name)
    _files(root, tiny)
    return root


def _sim(t):
    return ["simulate", "--trace", t, *CLUSTER, "--policy", "verl"]


def _cmp(t):
    return ["compare", "--trace", t, *CLUSTER, "--policies", "verl,tlt"]


def _synth(out, **flags):
    values = {"steps": "1", "prompts": "2", "group": "2", "max-len": "64", "seed": "0", **flags}
    return ["trace", "synth", "dapo", *[w for k, v in values.items() for w in (f"--{k}", v)], "-o", out]


def _verl(s, t, metrics):
    return ["validate", "--verl-metrics", s / metrics, "--trace", t, *CLUSTER[:4]]


# name -> (argv from the sandbox `s` and the trace `t`, what the line says)
CASES = {
    "config file not UTF-8": (lambda s, t: [*_sim(t), "--config", s / "bad.toml", "-o", s / "o"],
                              "bad.toml: not UTF-8 text (byte 25); save the TOML file as UTF-8"),
    "gpu file not UTF-8": (lambda s, t: [*_sim(t), "--gpu", s / "badgpu.toml", "-o", s / "o"],
                           "badgpu.toml: not UTF-8 text (byte 13)"),
    "config file too big": (lambda s, t: [*_sim(t), "--config", s / "huge.toml", "-o", s / "o"],
                            "huge.toml: 5,000,000 bytes, more than the 4,194,304 a config file may have"),
    "config file a directory": (lambda s, t: [*_sim(t), "--config", s / "userdir", "-o", s / "o"],
                                "userdir: config file not found (it is a directory)"),
    "config: negative seed": (lambda s, t: [*_sim(t), "--config", s / "seed.toml", "-o", s / "o"], "seed = -1 must be >= 0"),
    "config: steps backwards": (lambda s, t: [*_sim(t), "--config", s / "steps.toml", "-o", s / "o"],
                                "steps = '5:2': expected a count N >= 1 (steps 0..N-1) or A:B with 0 <= A < B"),
    "config: unknown key": (lambda s, t: [*_sim(t), "--config", s / "unknown.toml", "-o", s / "o"],
                            "[cluster] unknown key(s) gpu_count"),
    "config: wrong type": (lambda s, t: [*_sim(t), "--config", s / "typed.toml", "-o", s / "o"],
                           "cluster.gpus = 'eight' should be an integer"),
    "config: a value for a section": (lambda s, t: [*_sim(t), "--config", s / "section.toml", "-o", s / "o"],
                                      "[cluster] must be a table"),
    "config: more GPUs than any cluster": (lambda s, t: [*_sim(t), "--config", s / "bigint.toml", "-o", s / "o"],
                                           "must be <= 1,048,576"),
    "--gpus past an index": (lambda s, t: ["simulate", "--trace", t, "--gpus", "1" + "0" * 30, "--tp", "2",
                                           "--no-progress", "-o", s / "o"], "must be <= 1,048,576"),
    "--seed -1 --exact": (lambda s, t: [*_sim(t), "--seed", "-1", "--exact", "-o", s / "o"], "seed = -1 must be >= 0"),
    "--gpu-memory-utilization nan": (lambda s, t: [*_sim(t), "--gpu-memory-utilization", "nan", "-o", s / "o"],
                                     "cost.mem_fraction = nan should be a finite number"),
    "--gpu-memory-utilization 0": (lambda s, t: [*_sim(t), "--gpu-memory-utilization", "0", "-o", s / "o"],
                                   "cost.mem_fraction = 0.0 must be in (0, 1]"),
    "--steps past the trace": (lambda s, t: [*_sim(t), "--steps", "50:60", "-o", s / "o"], "steps"),
    "--steps not a range": (lambda s, t: [*_sim(t), "--steps", "three", "-o", s / "o"],
                            "expected a count N >= 1 (steps 0..N-1) or A:B"),
    "--tp not dividing --gpus": (lambda s, t: ["simulate", "--trace", t, "--gpus", "6", "--tp", "4", "--no-progress",
                                               "-o", s / "o"], "is not a multiple of tp"),
    "unknown policy": (lambda s, t: ["simulate", "--trace", t, *CLUSTER, "--policy", "fastest", "-o", s / "o"],
                       "unknown policy 'fastest'"),
    "three policies combined": (lambda s, t: ["simulate", "--trace", t, *CLUSTER, "--policy", "partial+tlt+migrate",
                                              "-o", s / "o"], "unknown policy"),
    "unknown knob": (lambda s, t: [*_sim(t), "--knob", "speed=11", "-o", s / "o"], "unknown knob(s) speed"),
    "knob without =": (lambda s, t: [*_sim(t), "--knob", "threshold", "-o", s / "o"], "expected KEY=VALUE"),
    "knob nested too deeply": (lambda s, t: ["simulate", "--trace", t, *CLUSTER, "--policy", "tlt", "--knob",
                                             "arms=" + "[" * 50_000, "-o", s / "o"], "expected depth_topk_verify"),
    "no trace": (lambda s, t: ["simulate", *CLUSTER, "-o", s / "o"], "no trace given"),
    "trace missing": (lambda s, t: ["simulate", "--trace", s / "nope.parquet", *CLUSTER, "-o", s / "o"],
                      "nope.parquet does not exist"),
    "trace of unknown format": (lambda s, t: ["simulate", "--trace", s / "notes.md", *CLUSTER, "-o", s / "o"],
                                "unknown trace format '.md'"),
    "trace a directory": (lambda s, t: ["simulate", "--trace", s / "dir.parquet", *CLUSTER, "-o", s / "o"],
                          "is a directory"),
    "trace not Parquet": (lambda s, t: ["simulate", "--trace", s / "fake.parquet", *CLUSTER, "-o", s / "o"],
                          "not a readable Parquet file"),
    "compare --policies ''": (lambda s, t: ["compare", "--trace", t, *CLUSTER, "--policies", "", "-o", s / "o"],
                              "--policies '': an empty name"),
    "compare --policies verl,,tlt": (lambda s, t: ["compare", "--trace", t, *CLUSTER, "--policies", "verl,,tlt",
                                                   "-o", s / "o"], "an empty name"),
    "compare: an unknown policy among them": (lambda s, t: ["compare", "--trace", t, *CLUSTER, "--policies",
                                                            "verl,nope", "-o", s / "o"], "unknown policy 'nope'"),
    "report: truncated Parquet": (lambda s, t: ["report", s / "results/truncated_parquet", "-o", s / "r.html"],
                                  "timeline.parquet has"),
    "report: scrambled Parquet": (lambda s, t: ["report", s / "results/scrambled_parquet", "-o", s / "r.html"],
                                  "steps.parquet is damaged (its sha256 is not the one in manifest.json"),
    "report: truncated summary": (lambda s, t: ["report", s / "results/truncated_summary", "-o", s / "r.html"],
                                  "summary.json has"),
    "report: no summary": (lambda s, t: ["report", s / "results/no_summary", "-o", s / "r.html"],
                           "summary.json is missing (the manifest.json lists it)"),
    "report: no manifest": (lambda s, t: ["report", s / "results/no_manifest", "-o", s / "r.html"],
                            "not a complete result (no manifest.json"),
    "report: damaged manifest": (lambda s, t: ["report", s / "results/bad_manifest", "-o", s / "r.html"],
                                 "manifest.json is damaged"),
    "report: a manifest of an older tltsim": (lambda s, t: ["report", s / "results/legacy_manifest", "-o", s / "r.html"],
                                              "is of another tltsim version (no sha256 per file"),
    "report: a manifest naming a file outside": (lambda s, t: ["report", s / "results/escaping_manifest", "-o",
                                                               s / "r.html"], "outside the directory"),
    "report of a directory of results": (lambda s, t: ["report", s / "results", "-o", s / "r.html"],
                                         "holds results (bad_manifest, escaping_manifest, flipped_config_json"),
    "report: no such directory": (lambda s, t: ["report", s / "nope", "-o", s / "r.html"], "nope: does not exist"),
    "report: a file as the result": (lambda s, t: ["report", s / "file.txt", "-o", s / "r.html"], "is not a directory"),
    "report -o its own input's summary": (lambda s, t: ["report", s / "res", "-o", s / "res" / "summary.json"],
                                          "lies inside RESULT_DIR 1"),
    "report -o inside its second input": (lambda s, t: ["report", s / "res", s / "res_plus", "-o",
                                                        s / "res_plus" / "r.html"], "lies inside RESULT_DIR 2"),
    "report --figures its input": (lambda s, t: ["report", s / "res", "-o", s / "r.html", "--figures", s / "res"],
                                   "--figures"),
    "report --figures a file": (lambda s, t: ["report", s / "res", "-o", s / "r.html", "--figures", s / "file.txt"],
                                "file.txt is a file, so nothing can be written under it"),
    "report -o a directory": (lambda s, t: ["report", s / "results/no_manifest", "-o", s / "userdir"],
                              "userdir: is a directory; name a file"),  # the output is checked first
    "report -o under a file": (lambda s, t: ["report", s / "results/truncated_summary", "-o",
                                             s / "file.txt" / "r.html"], "file.txt is a file, so nothing can be written"),
    "bad value": (lambda s, t: ["simulate", "--gpus", "x", "-o", s / "o"],
                  "tltsim simulate: error: argument --gpus: invalid int value: 'x'; see `tltsim simulate --help`"),
    "bad choice": (lambda s, t: ["sweep", s / "sweep.toml", "--backend", "dask", "-o", s / "sw"],
                   "tltsim sweep: error: argument --backend: invalid choice: 'dask'"),
    "misspelt flag": (lambda s, t: [*_sim(t), "--polcy", "tlt", "-o", s / "o"],
                      "tltsim simulate: error: unrecognized argument(s): --polcy tlt; see `tltsim simulate --help`"),
    "missing argument": (lambda s, t: ["trace", "stats"],
                         "tltsim trace stats: error: the following arguments are required: file; "
                         "see `tltsim trace stats --help`"),
    "sweep metric": (lambda s, t: ["sweep", s / "sweep.toml", "-o", s / "sw", "--metric", "speed", "--workers", "1"],
                     "--metric 'speed' is not a summary metric; choose one of makespan_s"),
    "sweep whose runs fail": (lambda s, t: ["sweep", s / "sweep_too_big.toml", "-o", s / "sw", "--workers", "1",
                                            "--no-progress"], "does not fit"),
    "sweep file missing": (lambda s, t: ["sweep", s / "nope.toml", "-o", s / "sw"], "nope.toml: sweep file not found"),
    "sweep --workers 0": (lambda s, t: ["sweep", s / "sweep.toml", "-o", s / "sw", "--workers", "0"],
                          "workers = 0: must be >= 1"),
    "sweep -o under a file": (lambda s, t: ["sweep", s / "sweep.toml", "-o", s / "file.txt" / "sw"],
                              "file.txt is a file, so nothing can be written under it"),
    "sweep -o a file": (lambda s, t: ["sweep", s / "sweep.toml", "-o", s / "file.txt"], "is a file, not a directory"),
    "sweep -o its own spec's directory": (lambda s, t: ["sweep", s / "sweep.toml", "-o", s], "not a sweep's directory"),
    "validate: no run": (lambda s, t: ["validate"], "name at least one run directory"),
    "validate RUN --save-calibration": (lambda s, t: ["validate", s / "res", "--save-calibration", s / "c.json"],
                                        "--save-calibration: with --verl-metrics only"),
    "validate RUN --trace": (lambda s, t: ["validate", s / "res", "--trace", t], "--trace: with --verl-metrics only"),
    "validate --profile a directory": (lambda s, t: ["validate", s / "res", "--profile", s / "userdir"],
                                       "userdir: is a directory; give the CSV file"),
    "validate --profile missing": (lambda s, t: ["validate", s / "res", "--profile", s / "nope.csv"],
                                   "nope.csv: not found; give the CSV file"),
    "validate --profile of two rows": (lambda s, t: [
        "validate", ROOT / "traces/runs/real_verl_smollm2_longtail", "--profile", s / "p2.csv"],
        "p2.csv: its 1 decode row(s) cannot separate the 3 unknowns of a decode's time (a fixed cost, a cost a row, "
        "a cost a context token): that needs at least 3 rows over 2 or more batch sizes and 2 or more contexts"),
    "validate -o its run": (lambda s, t: ["validate", s / "res", "-o", s / "res"],
                            "res: exists and is not a validation tltsim wrote"),
    "validate -o inside its run": (lambda s, t: ["validate", s / "res", "-o", s / "res" / "v"], "lies inside RUN_DIR 1"),
    "validate --save-calibration inside its metrics' run": (
        lambda s, t: [*_verl(s, t, "m_zero.jsonl"), "--save-calibration", s / "m_zero.jsonl"], "is also --verl-metrics"),
    "validate --save-calibration with nothing fitted": (
        lambda s, t: [*_verl(s, t, "m_lens.jsonl"), "--save-calibration", s / "c.json"],
        "no calibration to save to"),  # its notes in the line, not before it
    "validate --verl-metrics with a run": (lambda s, t: [*_verl(s, t, "m_zero.jsonl"), s / "res"],
                                           "drop the run directories"),
    "metrics missing": (lambda s, t: _verl(s, t, "nope.jsonl"), "nope.jsonl does not exist"),
    "metrics: a 400-digit time": (lambda s, t: _verl(s, t, "m_huge.jsonl"), "key 'timing_s/gen': inf is not a time"),
    "metrics: zero rollout times": (lambda s, t: _verl(s, t, "m_zero.jsonl"), "0.0 is not a time or length"),
    "metrics: negative time": (lambda s, t: _verl(s, t, "m_neg.jsonl"), "-3.0 is not a time or length"),
    "metrics: NaN": (lambda s, t: _verl(s, t, "m_nan.jsonl"), "no line has 'timing_s/gen'"),
    "metrics: Infinity": (lambda s, t: _verl(s, t, "m_inf.jsonl"), "inf is not a time"),
    "metrics: text for a time": (lambda s, t: _verl(s, t, "m_text.jsonl"), "'fast' is not a number"),
    "metrics nested too deeply": (lambda s, t: _verl(s, t, "m_deep.jsonl"), "m_deep.jsonl, line 1: not valid JSON"),
    "metrics: a list per line": (lambda s, t: _verl(s, t, "m_list.jsonl"), "a JSON list, not an object"),
    "metrics: no data": (lambda s, t: _verl(s, t, "m_nodata.jsonl"), "expected {\"step\": k, \"data\": {...}}"),
    "metrics: negative step": (lambda s, t: _verl(s, t, "m_step.jsonl"), "-4 is not a step number"),
    "metrics: two runs in one file": (lambda s, t: _verl(s, t, "m_tworuns.jsonl"),
                                      "line 4: step 1 after step 3 (line 3): the steps start again"),
    "metrics: no rollout time": (lambda s, t: _verl(s, t, "m_none.jsonl"), "no line has 'timing_s/gen'"),
    "fit-drafter: one run as both sides": (lambda s, t: ["fit-drafter", "--spot", s / "res", "--frozen", s / "res"],
                                         "--spot and --frozen both name"),
    "fit-drafter: no static probes": (lambda s, t: ["fit-drafter", "--spot", ROOT / "traces/runs/real_tlt_smollm2"],
                                      "no static_drafter_accepted per step; give the frozen run with --frozen"),
    "fit-drafter: predicting a run without static probes": (
        lambda s, t: ["fit-drafter", "--spot", ROOT / "traces/runs/real_tlt_smollm2_longtail", "--predict",
                      ROOT / "traces/runs/real_tlt_smollm2"], "its spot-vs-static gap is not measured"),
    "fit-drafter: a damaged run": (lambda s, t: ["fit-drafter", "--spot", s / "results/flipped_steps_parquet",
                                               "--frozen", s / "res"], "steps.parquet is damaged"),
    "trace synth -o a directory": (lambda s, t: _synth(s / "dir.csv"), "dir.csv: is a directory; name a file"),
    "trace synth -o under a file": (lambda s, t: _synth(s / "file.txt" / "t.csv"), "so nothing can be written"),
    "trace synth: an impossible size": (lambda s, t: _synth(s / "x.parquet", steps="100000000", prompts="100000",
                                                            group="100"), "more than the 50,000,000 a trace may hold"),
    "trace synth: unknown family": (lambda s, t: ["trace", "synth", "zipf", "--steps", "1", "--prompts", "1", "--group",
                                                  "1", "--max-len", "8", "--seed", "0", "-o", s / "x.csv"], "zipf"),
    "trace synth: unknown format": (lambda s, t: _synth(s / "x.txt"), "unknown trace format '.txt'"),
    "trace synth --param not a number": (lambda s, t: [*_synth(s / "x.csv"), "--param", "rho=high"],
                                         "expected NAME=VALUE with a number"),
    "trace synth --param unknown": (lambda s, t: [*_synth(s / "x.csv"), "--param", "speed=1"], "speed"),
    "trace convert to a directory": (lambda s, t: ["trace", "convert", t, s / "dir.csv"], "dir.csv: is a directory"),
    "trace convert under a file": (lambda s, t: ["trace", "convert", t, s / "file.txt" / "t.csv"],
                                   "so nothing can be written"),
    "trace convert X X": (lambda s, t: ["trace", "convert", s / "pair.csv", s / "pair.csv"], "is also INPUT"),
    "trace convert into the dump": (lambda s, t: ["trace", "convert", s / "dump", s / "dump" / "t.parquet",
                                                  "--tokenizer", s / "userdir"], "lies inside INPUT"),
    "trace convert a dump without tokenizer": (lambda s, t: ["trace", "convert", s / "dump", s / "t.parquet"],
                                               "is a verl rollout dump"),
    "trace convert a dump with a NaN score": (lambda s, t: ["trace", "convert", s / "nandump", s / "t.parquet",
                                                           "--tokenizer", ROOT / "examples" / "verl" / "tokenizer"],
                                              "key 'score': NaN is not a finite number"),
    "trace convert --tokenizer of a trace": (lambda s, t: ["trace", "convert", t, s / "t.csv", "--tokenizer", "x"],
                                             "--tokenizer applies to verl rollout dumps"),
    "trace convert --max-len 0": (lambda s, t: ["trace", "convert", t, s / "t.csv", "--max-len", "0"],
                                  "0 is out of range; give a whole number >= 1"),
    "trace convert --max-len below the lengths": (lambda s, t: ["trace", "convert", t, s / "t.csv", "--max-len", "3"],
                                                  "exceeds the declared max_response_len 3"),
    "trace convert --requests-per-step of a Parquet": (lambda s, t: ["trace", "convert", t, s / "t.csv",
                                                                     "--requests-per-step", "4"], "Vidur CSV"),
    "trace stats: a sidecar of other data": (lambda s, t: ["trace", "stats", s / "pair.csv"],
                                             "pair.csv.meta.json: describes another version of pair.csv"),
    "trace stats: data edited after its sidecar": (lambda s, t: ["trace", "stats", s / "edited.csv"],
                                                   "describes another version of edited.csv"),
    "trace stats: nested too deeply (arrays)": (lambda s, t: ["trace", "stats", s / "deep_array.jsonl"],
                                                "deep_array.jsonl, line 1: not valid JSON"),
    "trace stats: nested too deeply (objects)": (lambda s, t: ["trace", "stats", s / "deep_object.jsonl"],
                                                 "deep_object.jsonl, line 1: not valid JSON"),
    "trace stats: a short row": (lambda s, t: ["trace", "stats", s / "rows.csv"], "line 2: 4 fields but the header has 5"),
    "trace stats: a negative length": (lambda s, t: ["trace", "stats", s / "neg.csv"], "response_len"),
    "trace stats: a fractional length": (lambda s, t: ["trace", "stats", s / "frac.csv"], "response_len"),
    "trace stats: an empty file": (lambda s, t: ["trace", "stats", s / "empty.csv"], "the file is empty"),
    "trace stats: no lengths": (lambda s, t: ["trace", "stats", s / "nolen.csv"], "missing column 'response_len'"),
    "trace stats: a column twice": (lambda s, t: ["trace", "stats", s / "dup.csv"], "appear more than once"),
    "trace stats: not UTF-8": (lambda s, t: ["trace", "stats", s / "latin.jsonl"], "is not UTF-8"),
    "trace stats: arrays, not objects": (lambda s, t: ["trace", "stats", s / "array.jsonl"], "not an object"),
    "trace stats: a dump's texts": (lambda s, t: ["trace", "stats", s / "dump" / "0.jsonl"], "a verl rollout dump"),
    "trace stats: a directory": (lambda s, t: ["trace", "stats", s / "dir.csv"], "is a directory"),
    "real run --model missing": (lambda s, t: ["real", "run", "--model", s / "missing", "-o", s / "run"],
                                 "missing': neither a save_pretrained directory, a known model nor a preset"),
}

for _key in FLOATS:  # a NaN or an infinity in a config file never becomes a result
    for _tag in NON_FINITE:
        CASES[f"config: {_key} = {_tag}"] = ((lambda k, g: lambda s, t: [*_sim(t), "--config", s / f"{k}_{g}.toml",
                                                                          "-o", s / "o"])(_key, _tag),
                                             f"{_key} = {float(_tag)!r} should be a finite number")
for _knob in KNOBS:
    CASES[f"config: knob {_knob} = nan"] = ((lambda k: lambda s, t: [*_sim(t), "--config", s / f"knob_{k}.toml",
                                                                      "-o", s / "o"])(_knob),
                                            f"policy_knobs.{_knob} = nan should be a finite number")
    for _json in ("NaN", "Infinity", "-Infinity"):
        CASES[f"--knob {_knob}={_json}"] = ((lambda k, j: lambda s, t: ["simulate", "--trace", t, *CLUSTER, "--policy",
                                                                         "tlt", "--knob", f"{k}={j}", "-o", s / "o"])(
            _knob, _json), f"{_json} is not a finite number")
for _name, _says in {"cal_inf": "reward_s are not all numbers", "cal_nan": "reward_s are not all numbers",
                     "cal_neg": "calibration.rollout = -1 must be > 0", "cal_zero": "calibration.rollout = 0 must be > 0",
                     "cal_str": "reward_s are not all numbers", "cal_bool": "reward_s are not all numbers",
                     "cal_huge": "calibration.rollout = 1e+308 is outside [0.001, 1000]",
                     "cal_tiny": "calibration.train = 1e-300 is outside [0.001, 1000]",
                     "cal_fixed": "calibration.other_s = 1e+308 s is more than 86400 s a step",
                     "cal_misspelt": "unknown key 'speed_factr'; a calibration's keys are format, phases",
                     "cal_phase": "unknown phase 'rollot'; did you mean 'rollout'? a calibration's phases are rollout",
                     "cal_noformat": "not a tltsim calibration", "cal_cluster": "its cluster and sources are not tables", "cal_deep": "not a readable calibration file",
                     "cal_text": "not a readable calibration file", "nope": "not a readable calibration file"}.items():
    for _cmd in ("simulate", "compare"):
        CASES[f"{_cmd} --calibration {_name}"] = ((lambda n, c: lambda s, t: [
            *(_sim(t) if c == "simulate" else _cmp(t)), "--calibration", s / f"{n}.json", "-o", s / "o"])(_name, _cmd),
            _says)
for _name, _says in {"bomb": "expands to more than 100,000 values", "trainer5": "trainer = 5 is not a section",
                     "rollout_list": "actor_rollout_ref = [1, 2] is not a section",
                     "nogpus": "trainer.n_gpus_per_node = -1 is not a whole number >= 1",
                     "textgpus": "trainer.n_gpus_per_node = 'eight' is not a whole number",
                     "mem": "gpu_memory_utilization = 2.5 is not a fraction", "interp": "cannot be resolved",
                     "notyaml": "not a readable YAML file", "nosection": "no 'trainer' or 'actor_rollout_ref' section",
                     "yamlnan": "gpu_memory_utilization = nan is not a fraction",
                     "huge": "more than the 4,194,304 a verl config may have", "latin": "not a readable YAML file"}.items():
    for _cmd in ("simulate", "compare"):
        CASES[f"{_cmd} --verl-config {_name}"] = ((lambda n, c: lambda s, t: [
            *(_sim(t) if c == "simulate" else _cmp(t)), "--verl-config", s / f"verl_{n}.yaml", "-o", s / "o"])(_name, _cmd),
            _says)
CASES["validate --verl-config bomb"] = (lambda s, t: [*_verl(s, t, "m_zero.jsonl"), "--verl-config",
                                                      s / "verl_bomb.yaml"], "expands to more than 100,000 values")
for _flag, _bad in {"--steps": ["0", "-1"], "--prompts": ["0"], "--group": ["0"], "--max-len": ["0"],
                    "--seed": ["-1"]}.items():
    for _value in _bad:
        CASES[f"trace synth {_flag} {_value}"] = ((lambda f, v: lambda s, t: _synth(s / "x.csv", **{f[2:]: v}))(
            _flag, _value), f"it must be a whole number >= {0 if _flag == '--seed' else 1}")
for _name, _value in {"drift": "nan", "rho": "inf", "sigma": "-inf"}.items():
    CASES[f"trace synth --param {_name}={_value}"] = ((lambda n, v: lambda s, t: [
        *_synth(s / "x.csv"), "--param", f"{n}={v}"])(_name, _value), f"{_name}")
CASES["trace synth --drift nan"] = (lambda s, t: [*_synth(s / "x.csv"), "--drift", "nan"], "drift=nan is out of range")

for _cmd, _argv in {"simulate": _sim, "compare": _cmp}.items():  # what a user has is never replaced by a result
    for _dir in USER_DIRS:
        CASES[f"{_cmd} -o {_dir}"] = ((lambda a, d: lambda s, t: [*a(t), "-o", s / d])(_argv, _dir),
                                      f"{_dir}: exists and is not a tltsim result")
    for _where, _says in {"file.txt": "file.txt: is a file, not a directory",
                          "file.txt/o": "file.txt is a file, so nothing can be written under it",
                          "res_plus": "res_plus: exists and is not a tltsim result",
                          "results": "results: exists and is not a tltsim result",
                          "results/no_manifest": "no_manifest: exists and is not a tltsim result"}.items():
        CASES[f"{_cmd} -o {_where}"] = ((lambda a, w: lambda s, t: [*a(t), "-o", s / w])(_argv, _where), _says)
CASES["simulate -o the result its --trace is in"] = (lambda s, t: [*_sim(s / "res" / "timeline.parquet"), "-o", s / "res"],
                                                    "holds --trace")
CASES["simulate -o the directory of its config"] = (lambda s, t: [*_sim(t), "--config", s / "userdir" / "notes.txt",
                                                                  "-o", s / "userdir"], "userdir: exists and is not")
for _name in RESULT_FILES:  # a flipped bit in any file of a result is found, and named
    CASES[f"report: a flipped bit in {_name}"] = ((lambda n: lambda s, t: [
        "report", s / "results" / f"flipped_{n.replace('.', '_')}", "-o", s / "r.html"])(_name), f"{_name} is damaged")
_NOT_OURS = "exists and is not a file tltsim wrote; it is left as is: pass --force to replace it, or choose another path"
for _name, (_argv, _file) in {  # a single file in the way that tltsim did not write: left as is, the command stops
        "report -o a user's file": (lambda s, t: ["report", s / "res", "-o", s / "notes.txt"], "notes.txt"),
        "report --figures over a user's PNG": (lambda s, t: ["report", s / "res", "-o", s / "r.html", "--figures",
                                                             s / "figs"], "lengths.png"),
        "trace synth -o a user's file": (lambda s, t: _synth(s / "fake.parquet"), "fake.parquet"),
        "trace synth -o a CSV without its sidecar": (lambda s, t: _synth(s / "rows.csv"), "rows.csv"),
        "trace synth -o a CSV beside a user's sidecar": (lambda s, t: _synth(s / "mine.csv"), "mine.csv.meta.json"),
        "trace convert to a user's file": (lambda s, t: ["trace", "convert", t, s / "rows.csv"], "rows.csv"),
        "trace convert to a CSV another sidecar describes": (lambda s, t: ["trace", "convert", t, s / "pair.csv"],
                                                             "pair.csv"),
        "calibrate --save-calibration a user's file": (lambda s, t: [
            "calibrate", *_verl(s, t, "m_zero.jsonl")[1:], "--save-calibration", s / "notes.txt"], "notes.txt"),
        "validate --save-calibration a user's file": (lambda s, t: [
            *_verl(s, t, "m_zero.jsonl"), "--save-calibration", s / "notes.txt"], "notes.txt"),
}.items():
    CASES[_name] = (_argv, f"{_file}: {_NOT_OURS}")
CASES["compare -o a result of simulate"] = (lambda s, t: [*_cmp(t), "-o", s / "res"],
                                            "res: exists and is not a tltsim result")
for _dir in ("userdir", "ud_config", "res_plus", "ud_csv"):
    CASES[f"validate -o {_dir}"] = ((lambda d: lambda s, t: [*_verl(s, t, "m_zero.jsonl"), "-o", s / d])(_dir),
                                    f"{_dir}: exists and is not a validation tltsim wrote")
for _dir in ("userdir", "ud_runs", "ud_csv", "res"):
    CASES[f"sweep -o {_dir}"] = ((lambda d: lambda s, t: ["sweep", s / "sweep.toml", "-o", s / d, "--workers", "1"])(
        _dir), f"{_dir}: exists and is not a sweep's directory")

REAL_NUMBERS = {  # (command words, flag) -> bad values; each refused by the argument parser, before torch
    ("pretrain", "--steps"): ["0", "-1"], ("pretrain", "--batch-tokens"): ["0"], ("pretrain", "--seed"): ["-1"],
    ("pretrain", "--eval"): ["-1"], ("pretrain", "--lr"): ["nan", "0", "inf"], ("pretrain", "--seconds"): ["inf", "0"],
    ("evaluate", "--problems"): ["0"], ("evaluate", "--samples"): ["0"], ("evaluate", "--temperature"): ["nan", "0"],
    ("evaluate", "--max-new-tokens"): ["0"], ("profile", "--repeats"): ["0"], ("profile", "--processes"): ["0"],
    ("profile", "--max-new-tokens"): ["0"], ("profile", "--temperature"): ["inf"], ("run", "--workers"): ["0"],
    ("run", "--steps"): ["0"], ("run", "--prompts"): ["0"], ("run", "--group"): ["0"], ("run", "--seed"): ["-1"],
    ("run", "--temperature"): ["nan", "-1"], ("run", "--max-new-tokens"): ["0"], ("run", "--max-running"): ["0"],
    ("run", "--lr"): ["nan", "0"], ("run", "--kl"): ["-0.1", "inf"], ("run", "--warmup-steps"): ["-1"],
    ("run", "--probe"): ["-1"], ("run", "--speed-probe"): ["-1"], ("run", "--threads"): ["0"],
    ("drafter", "--problems"): ["0"], ("drafter", "--max-new-tokens"): ["0"], ("drafter", "--vocab"): ["0"],
    ("drafter", "--steps"): ["-1"], ("drafter", "--unroll"): ["0"], ("drafter", "--heldout"): ["0"],
    ("speed", "--max-new-tokens"): ["0"], ("speed", "--rounds"): ["0"], ("model", "--threads"): ["0"],
}
for (_words, _flag), _values in REAL_NUMBERS.items():
    for _value in _values:
        CASES[f"real {_words} {_flag} {_value}"] = ((lambda w, f, v: lambda s, t: [
            "real", *w.split(), f, v, *({"evaluate": [s / "res"], "speed": ["--model", "x"]}.get(w, [])),
            *(["-o", s / "out"] if w in ("pretrain", "profile", "run", "drafter") else [])])(_words, _flag, _value),
            f"tltsim real {_words}: error: argument {_flag}: {_value}")
REAL_PATHS = {
    "real pretrain -o a user's directory": (["pretrain", "-o", "userdir"], "userdir: exists and is not empty or a checkpoint"),
    "real pretrain -o a file": (["pretrain", "-o", "file.txt"], "is a file, not a directory"),
    "real pretrain -o under a file": (["pretrain", "-o", "file.txt/x"], "so nothing can be written under it"),
    "real profile -o a directory": (["profile", "-o", "userdir"], "userdir: is a directory; name a file"),
    "real profile -o a user's file": (["profile", "-o", "notes.txt"], "notes.txt: exists and is not a file tltsim wrote"),
    "real drafter -o a user's file": (["drafter", "-o", "notes.txt"], "notes.txt: exists and is not a file tltsim wrote"),
    "real drafter --data a user's file": (["drafter", "-o", "d.pt", "--data", "notes.txt"],
                                          "notes.txt: exists and is not a file tltsim wrote"),
    "real profile -o under a file": (["profile", "-o", "file.txt/p.csv"], "so nothing can be written under it"),
    "real profile -o its --drafter-checkpoint": (["profile", "--drafter-checkpoint", "file.txt", "-o", "file.txt"], "is also --drafter-checkpoint"),
    "real profile --drafter-checkpoint not a checkpoint": (["profile", "--drafter-checkpoint", "file.txt", "-o", "p.csv"],
                                                "file.txt: not a drafter checkpoint"),
    "real profile --drafter-checkpoint a directory": (["profile", "--drafter-checkpoint", "userdir", "-o", "p.csv"],
                                           "userdir: not a drafter checkpoint"),
    "real profile --device cuda": (["profile", "--device", "cuda", "-o", "p.csv"], "--device cuda: this torch sees no CUDA"),
    "real profile --device banana": (["profile", "--device", "banana", "-o", "p.csv"], "not a torch device"),
    "real profile --batches 0": (["profile", "--batches", "0,1", "-o", "p.csv"],
                                 "--batches '0,1': expected comma-separated positive integers"),
    "real evaluate --device cuda": (["evaluate", "res", "--device", "cuda"], "this torch sees no CUDA device"),
    "real drafter -o a directory": (["drafter", "-o", "userdir"], "userdir: is a directory; name a file"),
    "real drafter -o its --data": (["drafter", "-o", "d.pt", "--data", "d.pt"], "-o and --data name one file"),
    "real drafter --data a directory": (["drafter", "-o", "d.pt", "--data", "userdir"], "userdir: is a directory"),
    "real drafter --temperature 0": (["drafter", "-o", "d.pt", "--temperature", "0"], "--temperature"),
    "real drafter -o its --init": (["drafter", "--init", "file.txt", "-o", "file.txt"], "is also --init"),
    "real run -o a user's directory": (["run", "-o", "ud_config"], "ud_config: exists and is not empty or a run"),
    "real run -o a file": (["run", "-o", "file.txt"], "is a file, not a directory"),
    "real run --device tpu": (["run", "--device", "tpu", "-o", "r_out"], "invalid choice: 'tpu'"),
    "real run --policy longest-first --knob predictor=oracle": (
        ["run", "--policy", "longest-first", "--knob", "predictor=oracle", "-o", "r_out"],
        "predictor 'oracle' knows each response's length before it is generated, which only a simulator can"),
    "real run --policy tlt-base --drafter-checkpoint": (["run", "--policy", "tlt-base", "--drafter-checkpoint", "file.txt", "-o", "r_out"],
                                             "policy 'tlt-base' loads no trained drafter (it drafts from each row's "
                                             "own text alone)"),
    "real run --policy das --drafter-checkpoint": (["run", "--policy", "das", "--drafter-checkpoint", "file.txt", "-o", "r_out"],
                                        "policy 'das' loads no trained drafter"),
    "real run --policy das a spot-training knob": (["run", "--policy", "das", "--knob", "buffer_steps=2", "-o", "r_out"],
                                                   "drop the spot-training knobs buffer_steps"),
    "real run --policy das --knob training=spot": (["run", "--policy", "das", "--knob", "training=spot", "-o", "r_out"],
                                               "training = 'spot' needs a drafter with weights"),
    "real run --policy das --probe-static": (["run", "--policy", "das", "--probe-static", "-o", "r_out"],
                                             "policy 'das' trains no drafter"),
    "real run --drafter-checkpoint a kind": (["run", "--policy", "das+tlt", "--drafter-checkpoint", "suffix", "-o", "r_out"],
                                  "a trained drafter's checkpoint file; the policy picks"),
    "real run --drafter-checkpoint a missing file": (["run", "--drafter-checkpoint", "nope.pt", "-o", "r_out"], "nope.pt: no such file"),
    "real run --drafter-checkpoint a file that is no drafter": (["run", "--drafter-checkpoint", "file.txt", "-o", "r_out"],
                                                     "file.txt: not a drafter checkpoint"),
    "real run --answers not a run": (["run", "--answers", "userdir", "-o", "r_out"],
                                     "userdir: not a run directory (no config.json)"),
    "real run --answers a run without answers": (["run", "--answers", "res", "-o", "r_out"],
                                                 "res: no answers.parquet"),
    "real speed --batches x": (["speed", "--model", "test-llama", "--batches", "1,x"], "--batches '1,x': expected"),
    "real model fetch unknown": (["model", "fetch", "gpt-17", "--cache", "cache"], "not a known model"),
    "real model fetch --cache under a file": (["model", "fetch", "smollm2-135m", "--cache", "file.txt/c"],
                                              "cannot write the model cache there"),
    "real model without a verb": (["model"], "the following arguments are required: model_command"),
}
for _name, (_argv, _says) in REAL_PATHS.items():
    CASES[_name] = ((lambda a: lambda s, t: ["real", *[s / w if (s / w.split("/")[0]).exists() or w in (
        "p.csv", "d.pt", "r_out", "cache", "out") else w for w in a]])(_argv), _says)


def tree(root: Path) -> dict:
    """Every path under `root` with its bytes (None for a directory; size and mtime for a file over 1 MB)."""
    def state(p: Path):
        if p.is_dir():
            return None
        st = p.stat()
        return (st.st_size, st.st_mtime_ns) if st.st_size > 1 << 20 else p.read_bytes()
    return {str(p.relative_to(root)): state(p) for p in sorted(root.rglob("*"))}


def fails(capsys, argv) -> str:
    """Run `tltsim argv`; assert exit 2, nothing on stdout, exactly one line on stderr; return that line."""
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's errors exit
        rc = e.code
    out, err = capsys.readouterr()
    assert (rc, out) == (2, ""), (rc, out, err)
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    return err.rstrip("\n")


def test_the_table_is_large():
    assert len(CASES) >= 200, len(CASES)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(case, tmp_path, tiny, template, capsys, monkeypatch):
    if case.startswith("real "):
        pytest.importorskip("torch")
        monkeypatch.setenv("TLTSIM_CACHE", str(tmp_path / "cache"))  # never the shared cache
    argv, says = CASES[case]
    root = tmp_path / "sandbox"
    shutil.copytree(template, root, copy_function=os.link)  # hard links: a write replaces a file (atomic) or shows
    before = tree(root)
    line = fails(capsys, argv(root, tiny))
    assert says in line, line
    assert tree(root) == before, "a failed command changed its sandbox"


def test_in_a_real_process_too(tmp_path, tiny, template):
    root = tmp_path / "sandbox"
    shutil.copytree(template, root)
    for case in ("misspelt flag", "config file not UTF-8", "report: truncated Parquet", "simulate -o ud_config"):
        argv, says = CASES[case]
        r = tltsim(*argv(root, tiny))
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, tiny, template, capsys):
    t0 = time.perf_counter()
    fails(capsys, CASES["simulate --verl-config bomb"][0](template, tiny))
    assert time.perf_counter() - t0 < 5  # it expands to 9^10 values: expanding them would take hours


# --- kills and concurrent writers ------------------------------------------------------------------------


def _pair(path: Path) -> tuple:
    """What a CSV trace and its sidecar read as together."""
    trace = load(path)
    return trace.meta.source, len(trace.df)


def test_a_killed_csv_convert_leaves_data_and_metadata_that_belong_together(tmp_path):
    small = save(synth("dapo", steps=1, prompts=4, group=2, max_len=512, seed=0), tmp_path / "small.parquet")
    big = save(synth("mixture", steps=40, prompts=64, group=8, max_len=8192, seed=1), tmp_path / "big.parquet")
    out = tmp_path / "out.csv"
    old, new = (start(["trace", "convert", p, tmp_path / f"ref_{p.stem}.csv"]) for p in (small, big))
    old.join(), new.join()
    pairs = {_pair(tmp_path / "ref_small.csv"): "old", _pair(tmp_path / "ref_big.csv"): "new"}
    t0 = time.monotonic()
    assert main(["trace", "convert", str(big), str(tmp_path / "timed.csv")]) == 0
    duration = time.monotonic() - t0
    seen = []
    for i in range(8):
        assert main(["trace", "convert", str(small), str(out)]) == 0
        proc = start(["trace", "convert", big, out])
        time.sleep(duration * i / 7)
        proc.kill()
        proc.join()
        seen.append(pairs[_pair(out)])  # the old pair or the new one, never the new data under the old label
    assert seen[0] == "old", seen


def test_two_writers_of_one_result_the_second_says_it_lost(tmp_path, capsys):
    trace = save(synth("dapo", steps=6, prompts=32, group=8, max_len=4096, seed=2), tmp_path / "t.parquet")
    out = tmp_path / "o"
    first = start(["simulate", "--trace", trace, *CLUSTER, "--policy", "tlt", "--exact", "-o", out])
    lock = tmp_path / ".o.lock"
    deadline = time.monotonic() + 30
    while not lock.exists() and first.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    line = fails(capsys, ["simulate", "--trace", trace, *CLUSTER, "--policy", "verl", "-o", out])
    assert "another tltsim (pid " in line and "is writing it now; this one stops and writes nothing" in line
    first.join()
    assert first.exitcode == 0 and json.loads((out / "summary.json").read_text())["policy"] == "tlt"
    assert not [p.name for p in tmp_path.iterdir() if is_temporary(p.name)]  # the lock went with its writer


def test_a_lock_left_by_a_killed_writer_is_taken_over(tmp_path, tiny):
    out = tmp_path / "o"
    (tmp_path / ".o.lock").write_text("999999\n")  # its writer was killed: the file stays, its lock does not
    assert main(["simulate", "--trace", str(tiny), *CLUSTER, "--policy", "verl", "-o", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def _hold_and_fork(path, pid_file) -> None:
    """Hold `path`'s lock, fork a child that outlives this process (as a pool worker does), then wait to be killed."""
    with exclusive(path):
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        pid_file.write_text(str(child))
        time.sleep(60)


def test_a_child_left_by_a_killed_writer_does_not_hold_its_lock(tmp_path):
    path, pid_file = tmp_path / "o", tmp_path / "child"
    writer = multiprocessing.get_context("fork").Process(target=_hold_and_fork, args=(path, pid_file))
    writer.start()
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:  # written, not just made
        time.sleep(0.005)
    child = int(pid_file.read_text())
    try:
        writer.kill()
        writer.join()
        os.kill(child, 0)  # still running
        with exclusive(path):  # and yet the lock is free
            pass
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_held_lock_refuses_every_kind_of_writer(tmp_path, tiny, capsys):
    for target, argv in {"o": ["simulate", "--trace", tiny, *CLUSTER, "-o"], "r.csv": ["trace", "convert", tiny],
                         "sw": ["sweep", "SPEC", "--workers", "1", "-o"]}.items():
        path = tmp_path / target
        spec = tmp_path / "sweep.toml"
        spec.write_text(SWEEP.format(tiny, "qwen2.5-7b"))
        with exclusive(path):
            line = fails(capsys, [spec if a == "SPEC" else a for a in argv] + [path])
        assert "is writing it now" in line and not path.exists()


def test_a_renamed_flag_or_knob_is_read_with_a_note_line(tmp_path, capsys, monkeypatch):
    """`real run --drafter` (now --drafter-checkpoint) and an older knob still read, each with one note line before
    the refusal the name it became gets."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("not a checkpoint")
    assert main(["real", "run", "-o", "r", "--policy", "das", "--drafter", "file.txt"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "tltsim: note: --drafter reads as --drafter-checkpoint, its name now",
        "tltsim: error: --drafter-checkpoint file.txt: policy 'das' loads no trained drafter (it drafts from the "
        "rollout history alone); drop --drafter-checkpoint"]
    assert main(["real", "run", "-o", "r", "--policy", "das", "--knob", "spot=true"]) == 2
    note, error = capsys.readouterr().err.splitlines()
    assert note.startswith("tltsim: note: policy 'das': knob spot = True reads as training = 'spot'")
    assert error == ("tltsim: error: policy 'das': training = 'spot' needs a drafter with weights (method suffix has "
                     "nothing to train); give training=frozen")
