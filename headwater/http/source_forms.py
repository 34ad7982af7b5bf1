"""The dashboard's source forms, drawn from each kind's options model: a field per option, typed as the
model types it, so a new option or a new kind gets its form field without a template change; and the
form's strings back into the source a request body would be, for the one validation (SourceConfig.parse)."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connectors import source_kind

# Fields of the source itself, besides its options (never names of options: the form is flat).
SOURCE_FIELDS = ("id", "kind", "collection", "schedule_interval_seconds", "schedule_cron")


@dataclass(frozen=True)
class FormField:
    name: str
    label: str
    input: str  # text, list (one per line), bool (a checkbox), number
    required: bool
    help: str
    placeholder: str
    value: str
    checked: bool = False


def _input_of(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is list:
        return "list"
    if annotation is bool:
        return "bool"
    if annotation in (int, float):
        return "number"
    return "text"


def _shown(value: Any, input_type: str) -> str:
    if value is None:
        return ""
    if input_type == "list":
        return "\n".join(str(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # 2, as it was typed, not 2.0
    return str(value)


def option_fields(kind: str, options: Mapping[str, Any], typed: Mapping[str, str] | None = None) -> list[FormField]:
    """The form fields of a kind's options: the stored `options`, or what was `typed` in a refused form."""
    fields = []
    for name, info in source_kind(kind).options.model_fields.items():
        input_type = _input_of(info.annotation)
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        if typed is not None:
            value = typed.get(name, "")
            checked = value in ("on", "true")
        else:
            value = _shown(options.get(name), input_type)
            checked = bool(options.get(name, default))
        fields.append(FormField(name=name, label=name.replace("_", " "), input=input_type, required=info.is_required(),
                                help=info.description or "", placeholder=_shown(default, input_type).replace("\n", ", "),
                                value=value, checked=checked))
    return fields


def _list(text: str) -> list[str]:
    return [item.strip() for line in text.splitlines() for item in line.split(",") if item.strip()]


def source_from_form(form: Mapping[str, str], kind: str) -> dict[str, Any]:
    """What the form says, as a request body would say it: blank fields are left to their defaults."""
    data: dict[str, Any] = {"kind": kind, "options": {}}
    for name in ("id", "collection", "schedule_interval_seconds", "schedule_cron"):
        value = (form.get(name) or "").strip()
        if value:
            data[name] = value
    try:
        model = source_kind(kind).options
    except ValueError:
        return data  # the kind itself is refused by the one validation
    for name, info in model.model_fields.items():
        input_type = _input_of(info.annotation)
        raw = (form.get(name) or "").strip()
        if input_type == "bool":
            if name in form:
                data["options"][name] = form.get(name) in ("on", "true")
        elif raw:
            data["options"][name] = _list(raw) if input_type == "list" else raw
    return data
