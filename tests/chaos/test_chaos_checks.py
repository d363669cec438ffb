"""The chaos checks themselves catch what they are meant to catch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.chaos_support import TAGS, ChaosFailure, Run, _check_effects


def _run(tmp_path: Path, lines: list[str]) -> Run:
    run = Run(tmp_path / "r", seed=1)
    run.effects.write_text("".join(line + "\n" for line in lines))
    return run


def _clean() -> list[str]:
    return [f"{what} {tag} k-{tag}" for tag in TAGS for what in ("start", "done")]


def test_every_effect_once_passes(tmp_path: Path) -> None:
    _check_effects(_run(tmp_path, _clean()))


def test_a_repeat_after_a_kill_passes(tmp_path: Path) -> None:
    lines = _clean()
    lines[2:2] = ["start b0 k-b0", "KILL 1 chat time:0.1 a0"]
    _check_effects(_run(tmp_path, lines))
    lines[2:4] = ["start b0 k-b0", "done b0 k-b0", "KILL 1 chat time:0.1 -"]  # not durable yet
    _check_effects(_run(tmp_path, lines))


@pytest.mark.parametrize(
    "change",
    [
        lambda ls: [*ls[:2], "start b0 k-b0", "done b0 k-b0", *ls[2:]],  # repeat, no kill
        lambda ls: [line for line in ls if "c0" not in line],  # an effect missing
        lambda ls: [*ls, "KILL 1 x y", "start a0 other-key", "done a0 other-key"],  # new key
        # a repeat after a kill at which its result was already durable
        lambda ls: [*ls[:4], "KILL 1 x y a0,b0", "start b0 k-b0", "done b0 k-b0", *ls[4:]],
    ],
)
def test_broken_guarantees_are_caught(tmp_path: Path, change: object) -> None:
    with pytest.raises(ChaosFailure):
        _check_effects(_run(tmp_path, change(_clean())))  # type: ignore[operator]
