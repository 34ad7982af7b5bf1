"""Stage 2's question and answer: the prompt for one pair, and the JSON schema its answer must follow.

The schema goes to the backend as a constraint (llama.cpp turns it into a grammar; OpenAI-compatible
servers take it as `response_format`), and the answer is validated again here with pydantic: an
answer that does not validate is retried, then recorded, never applied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Verdict = Literal["duplicate", "supersedes", "complementary", "conflicting", "unrelated"]
VERDICTS: tuple[str, ...] = ("duplicate", "supersedes", "complementary", "conflicting", "unrelated")
PROMPT_VERSION = "1"  # part of a cached decision's identity: a new prompt asks again


class Decision(BaseModel):
    """The LLM's answer about passages A and B."""

    model_config = ConfigDict(extra="forbid")

    decision: Verdict
    newer: Literal["A", "B", "none"] = Field(
        description="with supersedes: the passage that replaces the other; otherwise none")
    merged_text: str = Field(max_length=1500, description="with complementary: one text holding both passages' facts; otherwise empty")
    reason: str = Field(min_length=1, max_length=300, description="one sentence")

    @model_validator(mode="after")
    def _consistent(self) -> Decision:
        if self.decision == "supersedes" and self.newer == "none":
            raise ValueError("supersedes must say which passage is newer (A or B)")
        if self.decision == "complementary" and not self.merged_text.strip():
            raise ValueError("complementary must carry the merged text")
        return self


def decision_schema() -> dict:
    """The JSON schema sent as the output constraint (every field required, nothing else allowed)."""
    return {
        "type": "object",
        "properties": {
            "decision": {"type": "string", "enum": list(VERDICTS)},
            "newer": {"type": "string", "enum": ["A", "B", "none"]},
            # No maxLength: llama.cpp expands it into one nested rule per character, which crashed
            # its sampler (checked on 0.3.36); pydantic checks the lengths, max_tokens bounds them.
            "merged_text": {"type": "string"},
            "reason": {"type": "string"},
        },
        "required": ["decision", "newer", "merged_text", "reason"],
        "additionalProperties": False,
    }


class MalformedAnswer(ValueError):
    """The model's output is not JSON, or does not follow the schema."""


def parse_decision(raw: str) -> Decision:
    try:
        return Decision.model_validate(json.loads(raw))
    except json.JSONDecodeError as exc:
        raise MalformedAnswer(f"not JSON ({exc.msg} at {exc.pos})") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors())
        raise MalformedAnswer(f"does not follow the schema ({problems})") from None


@dataclass(frozen=True)
class Passage:
    """One side of a question: a chunk's own text and where and when it was written."""

    text: str
    uri: str
    date: str  # the document's version as its source reports it (a modification time, a commit, an ETag)


SYSTEM = (
    "You compare two passages from a company's documents and classify how they relate. Answer with JSON only.\n"
    "decision is one of:\n"
    "- duplicate: both say the same thing.\n"
    "- supersedes: both are about the same rule or fact but one is a newer version that replaces the other; "
    "set newer to A or B (use the dates and the content).\n"
    "- complementary: same topic, each adds different facts; put one text holding both in merged_text.\n"
    "- conflicting: same topic but they contradict each other and neither is clearly newer.\n"
    "- unrelated: different topics.\n"
    "newer is none unless decision is supersedes; merged_text is empty unless decision is complementary; "
    "reason is one short sentence."
)


def messages(a: Passage, b: Passage, max_chars: int = 1500) -> list[dict[str, str]]:
    """The chat messages for one pair (each passage cut to `max_chars`, so a prompt's size is bounded)."""
    def show(label: str, p: Passage) -> str:
        return f"Passage {label} (from {p.uri}, dated {p.date or 'unknown'}):\n{p.text[:max_chars]}"

    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": show("A", a) + "\n\n" + show("B", b)}]
