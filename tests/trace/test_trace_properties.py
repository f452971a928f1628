"""Property tests: malformed rows fed to the CSV, JSONL and verl loaders.

Each cell is written in a valid rendering of its intended value (5, 5.0, "5", "5e0") or in a
broken one (5.5, -6, NaN, inf, 1e30, true, junk text, a list, nothing at all); lines and
columns may be broken too. The oracle: if anything was broken the load raises TltsimError,
otherwise it returns exactly the intended values. Any other exception fails the test.
"""
import csv
import json
from decimal import Decimal, InvalidOperation

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tltsim.core.errors import TltsimError
from tltsim.trace import load

# derandomize: the same examples on every run, so CI cannot fail on one a previous run never drew
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
REQUIRED = ["step", "prompt_id", "sample", "prompt_len", "response_len"]
VALID = ["int", "float", "text", "exp"]
BROKEN = ["frac", "neg", "nan", "inf", "huge", "bool", "junk", "missing", "list"]


def not_a_number(t: str) -> bool:
    try:
        Decimal(t.strip())
    except InvalidOperation:
        return True
    return False


junk = st.text(max_size=8).filter(lambda t: t.strip() and not_a_number(t))


def render(draw, value: int, kind: str):
    """`value` written as `kind`: a valid rendering (VALID) or a broken one (BROKEN)."""
    return {
        "int": lambda: value, "float": lambda: float(value), "text": lambda: f" {value}", "exp": lambda: f"{value}e0",
        "frac": lambda: value + 0.5, "neg": lambda: -value - 1, "nan": lambda: float("nan"),
        "inf": lambda: float("inf"), "huge": lambda: 1e30, "bool": lambda: True, "junk": lambda: draw(junk),
        "missing": lambda: None, "list": lambda: [value],
    }[kind]()


def break_some(draw, cells: list[tuple[list, object, int]]) -> bool:
    """Write every cell validly, then break 0-2 of them (so a broken cell is rarely masked by
    another). `cells` holds (container, key, intended value). Returns whether any was broken."""
    for box, key, value in cells:
        box[key] = render(draw, value, draw(st.sampled_from(VALID)))
    n = draw(st.sampled_from([0, 0, 1, 1, 1, 2]))
    picks = draw(st.lists(st.integers(0, len(cells) - 1), min_size=n, max_size=n, unique=True)) if cells else []
    for i in picks:
        box, key, value = cells[i]
        box[key] = render(draw, value, draw(st.sampled_from(BROKEN)))
    return bool(picks)


@st.composite
def trace_rows(draw):
    """Intended rows of a valid trace (steps x prompts x group), how each cell is written, and
    whether any cell was broken."""
    steps, prompts, group = (draw(st.integers(1, 3)) for _ in range(3))
    with_reward = draw(st.booleans())
    rows, written, cells = [], [], []
    for s in range(steps):
        for p in range(prompts):
            plen = draw(st.integers(0, 5000))
            for j in range(group):
                row = {"step": 2 * s, "prompt_id": p, "sample": j, "prompt_len": plen,
                       "response_len": draw(st.integers(1, 10**6))}
                out = {}
                cells += [(out, k, v) for k, v in row.items()]
                if with_reward:
                    row["reward"] = out["reward"] = draw(st.one_of(st.none(), st.floats(-1e6, 1e6)))
                rows.append(row)
                written.append(out)
    broken = break_some(draw, cells)
    if with_reward and draw(st.integers(0, 4)) == 0:
        written[draw(st.integers(0, len(written) - 1))]["reward"] = draw(st.sampled_from([float("inf"), "x1", True, [0.5]]))
        broken = True
    return rows, written, broken


def check(path, rows, broken):
    try:
        t = load(path)
    except TltsimError as e:
        assert broken, f"valid input rejected: {e}"
        assert "\n" not in str(e)
        return
    assert not broken, "broken input loaded"
    got = t.df.to_dict("records")
    assert len(got) == len(rows)
    for g, r in zip(got, sorted(rows, key=lambda r: (r["step"], r["prompt_id"], r["sample"]))):
        for k, v in r.items():
            if k == "reward" and v is None:
                assert g[k] != g[k]  # NaN: not recorded
            else:
                assert g[k] == v and type(g[k]) is type(v), (k, g[k], v)


def csv_text(v) -> str:
    if v is None:
        return ""
    return json.dumps(v) if isinstance(v, (bool, list)) else str(v)


@SETTINGS
@given(trace_rows(), st.sampled_from(["none", "drop_column", "short_row", "long_row"]))
def test_csv_loader(tmp_path, data, damage):
    rows, written, broken = data
    cols = list(written[0])
    if damage == "drop_column":
        cols.remove("response_len")
    lines = [[csv_text(w[c]) for c in cols] for w in written]
    if damage == "short_row":
        lines[-1] = lines[-1][:-1]
    if damage == "long_row":
        lines[0] = lines[0] + ["7"]
    path = tmp_path / "t.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([cols] + lines)
    check(path, rows, broken or damage != "none")


@SETTINGS
@given(trace_rows(), st.sampled_from(["none", "drop_key", "bad_line", "array_line"]), st.integers(0, 100))
def test_jsonl_loader(tmp_path, data, damage, where):
    rows, written, broken = data
    records = [{k: v for k, v in w.items() if not (v is None and k != "reward")} for w in written]
    if damage == "drop_key":
        records[where % len(records)].pop("sample", None)  # a row written with sample None has none already
    lines = [json.dumps(r) for r in records]
    if damage == "bad_line":
        lines.insert(where % (len(lines) + 1), '{"step": 0, "prompt_id": ')
    if damage == "array_line":
        lines.insert(where % (len(lines) + 1), "[1, 2, 3]")
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    check(path, rows, broken or damage != "none")


@st.composite
def verl_records(draw):
    """verl-style lines (shuffled), the rows they should give, and whether any was broken."""
    steps, prompts, group = (draw(st.integers(1, 3)) for _ in range(3))
    with_rank = draw(st.booleans())
    recs, cells, broken = [], [], False
    for s in range(steps):
        for _ in range(prompts):
            intended = {"step": s, "input": draw(st.integers(0, 5000)), "output": [draw(st.integers(1, 10**6)) for _ in range(group)]}
            if with_rank:
                intended["dp_rank"] = draw(st.integers(0, 7))
            rec = {"output": [None] * group}
            cells += [(rec, k, intended[k]) for k in ["step", "input"] + (["dp_rank"] if with_rank else [])]
            cells += [(rec["output"], j, v) for j, v in enumerate(intended["output"])]
            n_sampling = draw(st.sampled_from(["absent", "right", "right", "wrong"]))
            if n_sampling == "right":
                rec["n_sampling"] = group
            elif n_sampling == "wrong":
                rec["n_sampling"] = group + 1
                broken = True
            rec["x_extra"] = draw(st.one_of(st.none(), st.text(max_size=4), st.lists(st.integers(), max_size=2)))
            recs.append((rec, intended))
    if (len(recs) > 1 or group == 1) and draw(st.integers(0, 4)) == 0:
        # one prompt one sample short: its group size disagrees with the others (or is empty)
        short = recs[draw(st.integers(0, len(recs) - 1))][0]["output"]
        short.pop()
        cells = [c for c in cells if not (c[0] is short and c[1] == len(short))]
        broken = True
    broken |= break_some(draw, cells)
    for rec, _ in recs:  # a "missing" key is absent, not null
        for k in [k for k in ("step", "input", "dp_rank") if k in rec and rec[k] is None]:
            del rec[k]
    recs = draw(st.permutations(recs))
    rows, next_prompt = [], {}
    for _, it in recs:
        p = next_prompt.get(it["step"], 0)
        next_prompt[it["step"]] = p + 1
        for j, L in enumerate(it["output"]):
            row = {"step": it["step"], "prompt_id": p, "sample": j, "prompt_len": it["input"], "response_len": L}
            if with_rank:
                row["engine"] = it["dp_rank"]
            rows.append(row)
    return [r for r, _ in recs], rows, broken


@SETTINGS
@given(verl_records(), st.sampled_from(["none", "bad_line", "blank_lines"]), st.integers(0, 100))
def test_verl_loader(tmp_path, data, damage, where):
    recs, rows, broken = data
    lines = [json.dumps(r) for r in recs]
    if damage == "bad_line":
        lines.insert(where % (len(lines) + 1), '{"step": 0, "output": [1, 2')
    if damage == "blank_lines":
        lines.insert(where % (len(lines) + 1), "   ")
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    check(path, rows, broken or damage == "bad_line")


@st.composite
def vidur_rows(draw):
    """Vidur request rows (arrival, prefill, decode), how each is written, and whether any was broken."""
    n = draw(st.integers(1, 12))
    intended = [(draw(st.floats(0, 1e6)), draw(st.integers(0, 5000)), draw(st.integers(1, 10**6))) for _ in range(n)]
    written = [{"arrived_at": repr(a), "num_prefill_tokens": None, "num_decode_tokens": None, "note": draw(st.text(max_size=3))}
               for a, _, _ in intended]
    cells = [(w, k, v) for w, (_, p, d) in zip(written, intended) for k, v in [("num_prefill_tokens", p), ("num_decode_tokens", d)]]
    broken = break_some(draw, cells)
    if draw(st.integers(0, 4)) == 0:
        written[draw(st.integers(0, n - 1))]["arrived_at"] = draw(st.one_of(junk, st.sampled_from(["nan", "inf", "", "1e400"])))
        broken = True
    order = sorted(range(n), key=lambda i: intended[i][0])
    rows = [{"step": 0, "prompt_id": r, "sample": 0, "prompt_len": intended[i][1], "response_len": intended[i][2]}
            for r, i in enumerate(order)]
    return written, rows, broken


@SETTINGS
@given(vidur_rows())
def test_vidur_loader(tmp_path, data):
    written, rows, broken = data
    path = tmp_path / "v.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(list(written[0]))
        w.writerows([[csv_text(x[c]) for c in written[0]] for x in written])
    check(path, rows, broken)
