import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Layers, bottom first: a module imports only from its own layer or those below (ast, so imports inside
# functions count too), and the pairs in SIBLINGS_APART not even within a layer. docs/architecture.md's table
# lists the same layers (test_the_architecture_doc_lists_these_layers).
LAYERS = [
    {"tltsim", "tltsim.core", "tltsim.trace", "tltsim.verl_metrics"},  # records, I/O, their meaning
    {"tltsim.control"},  # decisions, driven by every executor
    {"tltsim.hardware", "tltsim.cost", "tltsim.drafter", "tltsim.config", "tltsim.sim", "tltsim.policies", "real",
     "tltsim.verl_config"},  # executors, their settings and their models
    {"tltsim.analysis"},  # validation, calibration, sweeps, the report and its plots
    {"tltsim.cli", "tltsim.__main__", "real.cli"},  # command lines
]
SIBLINGS_APART = {  # importer -> what it must not import though it lies in the same layer or below
    "tltsim.sim": {"tltsim.policies", "real"},  # the simulator knows its hooks (tltsim.sim.hooks), not the policies
    "tltsim.cost": {"tltsim.sim", "tltsim.policies", "real", "tltsim.config"},
    "tltsim.drafter": {"tltsim.sim", "tltsim.policies", "real", "tltsim.config"},  # the models the settings stand on
    "real": {"tltsim.sim", "tltsim.policies", "tltsim.config", "tltsim.hardware"},  # real/ stands on the policy layer
    "tltsim.policies": {"real"},
    "real.cli": {"tltsim.cli"},  # both command lines share tltsim.core.argparser, at the bottom
}


def unit(module: str) -> str | None:
    """The layering unit of a module: tltsim.<subpackage or module>, real, real.cli; None outside the project."""
    parts = module.split(".")
    if parts[0] == "real":
        return "real.cli" if module == "real.cli" else "real"
    if parts[0] != "tltsim":
        return None
    return "tltsim" if len(parts) == 1 else f"tltsim.{parts[1]}"


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def wrong_way(files) -> list[str]:
    """'importer -> imported' for every import that runs against the layers."""
    rank = {u: i for i, layer in enumerate(LAYERS) for u in layer}
    bad = []
    for path in files:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        src = unit(module)
        for name in sorted(imports(path)):
            dst = unit(name)
            if dst is None or dst == src:
                continue
            if rank[dst] > rank[src] or dst in SIBLINGS_APART.get(src, ()):
                bad.append(f"{module} -> {name}")
    return bad


def cycles(files) -> list[list[str]]:
    """Every set of two or more units that import each other round a circle (within one layer the layers allow it),
    each sorted: the strongly connected components of the units' import graph."""
    graph: dict[str, set[str]] = {}
    for path in files:
        src = unit(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
        graph.setdefault(src, set()).update(d for d in map(unit, imports(path)) if d not in (None, src))
    reach = {}
    for start in graph:  # the units each reaches; small graph, so a walk from each
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    found = {frozenset(u for u in reach[a] if a in reach.get(u, ())) | {a} for a in graph if a in reach[a]}
    return sorted(sorted(c) for c in found)


def project_files() -> list[Path]:
    return sorted(p for pkg in ("tltsim", "real") for p in (ROOT / pkg).rglob("*.py"))


def test_every_unit_has_a_layer():
    rank = {u for layer in LAYERS for u in layer}
    assert {unit(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
            for p in project_files()} <= rank


def test_imports_run_one_way():
    assert wrong_way(project_files()) == []


def test_no_units_import_each_other_round_a_circle():
    assert cycles(project_files()) == []


def test_a_circle_within_a_layer_is_caught(tmp_path, monkeypatch):
    """The settings reading the simulator's models while the simulator reads the settings: one layer, two ways."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "tltsim" / "sim").mkdir(parents=True)
    config, sim = tmp_path / "tltsim" / "config.py", tmp_path / "tltsim" / "sim" / "simulator.py"
    config.write_text("def f():\n    from tltsim.sim.quality import DrafterConfig\n")
    sim.write_text("from tltsim.config import SimConfig\n")
    assert wrong_way([config, sim]) == []  # the layers alone allow it
    assert cycles([config, sim]) == [["tltsim.config", "tltsim.sim"]]


def test_a_wrong_way_import_is_caught(tmp_path, monkeypatch):
    """The check itself: a simulator module that imports the policies, a real/ module that imports the simulator."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "tltsim" / "sim").mkdir(parents=True)
    (tmp_path / "real").mkdir()
    sim = tmp_path / "tltsim" / "sim" / "engine.py"
    sim.write_text("from tltsim.control import EngineControl\n\ndef f():\n    from tltsim.policies import make_policy\n")
    real = tmp_path / "real" / "run.py"
    real.write_text("import tltsim.sim.simulator\nfrom tltsim.core.records import Result\n")
    policy = tmp_path / "tltsim" / "control.py"
    policy.write_text("from tltsim.sim.engine import Speculation\n")
    assert wrong_way([sim, real, policy]) == ["tltsim.sim.engine -> tltsim.policies",
                                              "real.run -> tltsim.sim.simulator", "tltsim.control -> tltsim.sim.engine"]


def test_policy_layer_imports_neither_torch_nor_simpy():
    """Both executors drive these objects; the real backend must not need simpy, nor the simulator torch."""
    code = ("import sys, tltsim.control; "
            "print(sorted(m for m in ('torch', 'simpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def doc_layers() -> list[set[str]]:
    """The layers as docs/architecture.md's table gives them: one row a layer, top first; the `where` column's
    paths (`tltsim/analysis/`, `real/cli.py`) named as layering units."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## The layers", 1)[1].split("\n\n")[2]
    rows = [line.split("|")[3] for line in table.splitlines()[2:]]
    units = []
    for where in rows:
        paths = re.findall(r"`([^`]+)`", where)
        units.append({unit(p.rstrip("/").removesuffix(".py").replace("/", ".").removesuffix(".__init__"))
                      for p in paths})
    return units[::-1]


def test_the_architecture_doc_lists_these_layers():
    """The doc cannot drift from what is enforced: its table names each layer's units, bottom row first here."""
    assert doc_layers() == LAYERS
