"""One glossary, the same words everywhere; one colour per policy."""
import itertools
import re
from pathlib import Path

import matplotlib as mpl
import numpy as np

from tltsim.core import glossary
from tltsim.cli import build_parser
from tltsim.policies import policy_names
from tltsim.analysis.report.plots.style import policy_color

GLOSSARY = Path(__file__).resolve().parents[2] / "docs" / "glossary.md"


def words(text: str) -> str:
    return " ".join(text.split())


def test_the_glossary_page_holds_the_glossary_verbatim():
    text = GLOSSARY.read_text()
    block = re.search(r"<!-- glossary:[^>]*-->\n(.*?)\n<!-- end of glossary -->", text, re.S)
    assert block, "docs/glossary.md has no generated glossary block"
    assert block.group(1) == glossary.markdown()


def test_compare_help_ends_with_every_definition():
    compare = build_parser()._subparsers._group_actions[0].choices["compare"]
    text = words(compare.format_help())
    for name, definition in {**glossary.COLUMNS, **glossary.BOUNDS}.items():
        assert f"{name} {words(definition)}" in text


def test_every_summary_key_of_a_run_is_defined(base, tlt):
    for r in (base, tlt):
        assert set(r.summary) <= set(glossary.DEFINITIONS), set(r.summary) - set(glossary.DEFINITIONS)


def _lab(colour: str) -> np.ndarray:
    """CIELAB (D65) of an sRGB colour."""
    rgb = np.array(mpl.colors.to_rgb(colour))
    linear = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    f = np.cbrt(xyz / np.array([0.95047, 1.0, 1.08883]))
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_every_shipped_policy_gets_its_own_distinguishable_colour():
    colours = [policy_color(name) for name in policy_names()]
    assert len(set(colours)) == len(colours) >= 16
    closest = min(np.linalg.norm(_lab(a) - _lab(b)) for a, b in itertools.combinations(colours, 2))
    assert closest > 25  # CIELAB distance: 2.3 is just noticeable; 25+ tells lines apart at a glance
    assert all(25 < _lab(c)[0] < 80 for c in colours)  # neither near black nor washed out on white


def test_the_glossary_says_every_drafter_name_once():
    from tltsim.core.drafter_names import METHOD_NAMES, TRAINING_NAMES

    assert tuple(glossary.DRAFTERS) == (*METHOD_NAMES, *TRAINING_NAMES)
