"""The LLM judge: a model grades a case's final reply against the case's rubric.

The judge is asked for a JSON object ``{"score": 0..1, "reason": "..."}``; its score and
reason go in the case's result (the JSON report keeps them). Its model is the case's
``judge.model``, else the case file's ``judge_model``, else ``--judge-model``, else
``EVE_JUDGE_MODEL``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import TypedDict

from eve_cli._json import JSONObject
from eve_cli.evals._case import Case, Judge

JUDGE_ENV = "EVE_JUDGE_MODEL"

SYSTEM = (
    "You grade the reply of an AI assistant against a rubric. Answer with one JSON object and "
    'nothing else: {"score": <a number from 0 to 1>, "reason": "<one sentence>"}. 1 means the '
    "reply fully meets the rubric, 0 that it does not at all."
)


class JudgeRecord(TypedDict):
    """A verdict as results and reports keep it."""

    model: str
    score: float | None
    reason: str
    passed: bool


@dataclass(frozen=True)
class Verdict:
    """What the judge said."""

    model: str
    score: float | None
    reason: str
    passed: bool

    def as_dict(self) -> JudgeRecord:
        return {
            "model": self.model,
            "score": self.score,
            "reason": self.reason,
            "passed": self.passed,
        }


def judge_model(case: Case, judge: Judge, default: str | None) -> str | None:
    """The model that judges ``case`` (see the module)."""
    return judge.model or case.judge_model or default or os.environ.get(JUDGE_ENV) or None


def prompt(case: Case, reply: str, rubric: str) -> str:
    said = "\n".join(f"User: {m}" for m in case.messages)
    return (
        f"Conversation:\n{said}\n\nThe assistant's final reply:\n<reply>\n{reply}\n</reply>\n\n"
        f"Rubric:\n{rubric}\n\nGrade the final reply. Answer with the JSON object only."
    )


async def run_judge(case: Case, judge: Judge, reply: str, model_name: str) -> Verdict:
    """Ask ``model_name`` to grade ``reply``; a failed call or an unreadable answer fails."""
    from eve_cli.models import Model, ModelError, ModelRequest, resolve_model

    model: Model | None = None
    try:
        model = resolve_model(model_name)
        request = ModelRequest(
            system=SYSTEM,
            messages=[{"role": "user", "content": prompt(case, reply, judge.rubric)}],
            max_tokens=400,
        )
        answer = await model.generate(request)
    except (ModelError, ValueError) as exc:
        return Verdict(model_name, None, f"the judge's call failed: {exc}", False)
    finally:
        if model is not None:
            await model.aclose()
    return verdict(model_name, answer.text, judge.min_score)


def verdict(model_name: str, text: str, min_score: float) -> Verdict:
    """The verdict a judge's answer ``text`` gives."""
    found = _json_object(text)
    score = found.get("score") if found is not None else None
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        shown = text.strip()[:200]
        return Verdict(model_name, None, f"the judge gave no score from 0 to 1: {shown!r}", False)
    reason = str((found or {}).get("reason") or "")
    return Verdict(model_name, float(score), reason, float(score) >= min_score)


def _json_object(text: str) -> JSONObject | None:
    for candidate in (text.strip(), *re.findall(r"\{.*?\}", text, re.DOTALL)):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None
