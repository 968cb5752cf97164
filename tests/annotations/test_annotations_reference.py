"""The annotation reference (docs/annotations.md) is generated from the model and must not drift."""

from pathlib import Path

import pytest

from autoscaler import metricnames
from autoscaler.contract import annotations
from autoscaler.contract import reference as ann

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = (
    f"docs/annotations.md differs from the model. Put the lines "
    f"{ann.REFERENCE_BEGIN} and {ann.REFERENCE_END} in docs/annotations.md, then run "
    "`.venv/bin/python -m autoscaler.contract.reference --update docs/annotations.md` from the "
    "repository root "
    "(or paste the output of `python -m autoscaler.contract.reference` between them)."
)


def test_the_reference_matches_the_model() -> None:
    """docs/annotations.md holds exactly the table `reference_markdown` generates, between the
    markers."""
    readme = (ROOT / "docs" / "annotations.md").read_text(encoding="utf-8")
    section = ann.section_of(readme)
    assert section is not None, REGENERATE
    assert section == ann.reference_markdown(), REGENERATE


def test_reference_lists_every_key_with_its_rule() -> None:
    """Every setting appears in the table with its default and the rule its errors quote."""
    reference = ann.reference_markdown()
    for key, rule in annotations.RULES.items():
        short = key.removeprefix(annotations.PREFIX)
        row = next(line for line in reference.splitlines() if line.startswith(f"| `{short}` |"))
        cell = rule.replace("|", "\\|")
        assert row.endswith(f"| {cell} |")
    assert "| `min-replicas` | Fewest replicas, even with no load. | `2` |" in reference
    assert (
        "| `window` | Smoothing window: how much history the decision sees. | `5m` |" in reference
    )
    assert "| `project` | Accounting label on the GPU-hours counter. | the namespace |" in reference


def test_reference_lists_the_presets() -> None:
    """The presets table names every preset server's queue metric."""
    reference = ann.reference_markdown()
    for names in metricnames.PRESETS.values():
        assert names.queue is not None
        assert f"`{names.queue}`" in reference


def test_update_splices_between_markers(tmp_path: Path) -> None:
    """`--update` replaces only the text between the markers, and the check then passes."""
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# Title\n\nbefore\n{ann.REFERENCE_BEGIN}\nstale\n{ann.REFERENCE_END}\nafter\n",
        encoding="utf-8",
    )
    assert ann.main(["--update", str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text.startswith(f"# Title\n\nbefore\n{ann.REFERENCE_BEGIN}\n")
    assert text.endswith(f"{ann.REFERENCE_END}\nafter\n")
    assert "stale" not in text
    assert ann.section_of(text) == ann.reference_markdown()


def test_update_without_markers_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--update` on a file without markers changes nothing and says what to add."""
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n", encoding="utf-8")
    assert ann.main(["--update", str(readme)]) == 2
    assert readme.read_text(encoding="utf-8") == "# Title\n"
    assert ann.REFERENCE_BEGIN in capsys.readouterr().err


def test_main_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    """With no arguments the module prints the reference for pasting."""
    assert ann.main([]) == 0
    assert capsys.readouterr().out == ann.reference_markdown()
