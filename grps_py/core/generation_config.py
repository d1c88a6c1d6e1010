"""The settings of a generative model (`inferer_type: generative`): its continuous batching
(`generation:`) and the OpenAI-compatible routes that serve it (`openai:`), read from its
inference.yml entry; and the server's `openai:` section (the routes' path prefix)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grps_py.core.yaml_fields import Fields

GENERATION_KEYS = (
    "max_running",
    "max_waiting",
    "token_budget",
    "max_tokens",
    "max_tokens_limit",
    "decode_steps",
)
OPENAI_KEYS = ("chat", "completions", "embeddings", "served_name")
SERVER_OPENAI_KEYS = ("prefix",)
# A served name is a path segment of /v1/models/{id}: printable, no slash or space.
_SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}")
_PREFIX = re.compile(r"(/[A-Za-z0-9._-]+){1,4}")


@dataclass(frozen=True)
class GenerationSettings:
    """How the continuous batcher runs the model (grps_py/generation/batcher.py)."""

    max_running: int = 16  # sequences decoded together (capped by the model's own max_running)
    max_waiting: int = 64  # requests admitted to the model but waiting for a slot (Overloaded past it)
    token_budget: int = 4096  # prompt tokens prefilled in one step (one prompt is always admitted)
    max_tokens: int = 256  # a request that names no max_tokens generates at most this many
    max_tokens_limit: int = 4096  # the most a request may ask for (400 above it)
    # Decode steps run back to back in one model call while no request waits for a slot: the
    # per-token serving work is shared by that many tokens (vLLM's multi-step scheduling). 1: off.
    decode_steps: int = 4


@dataclass(frozen=True)
class OpenAISettings:
    """Which OpenAI routes serve the model, and under which `model` name clients call it."""

    served_name: str
    chat: bool = True
    completions: bool = True
    embeddings: bool = False


def parse_generation(fields: Fields) -> GenerationSettings:
    defaults = GenerationSettings()
    max_tokens_limit = fields.integer("max_tokens_limit", defaults.max_tokens_limit, 1)
    max_tokens = fields.integer("max_tokens", min(defaults.max_tokens, max_tokens_limit), 1)
    if max_tokens > max_tokens_limit:
        fields.fail("max_tokens", max_tokens, f"at most max_tokens_limit ({max_tokens_limit})")
    return GenerationSettings(
        max_running=fields.integer("max_running", defaults.max_running, 1),
        max_waiting=fields.integer("max_waiting", defaults.max_waiting, 1),
        token_budget=fields.integer("token_budget", defaults.token_budget, 1),
        max_tokens=max_tokens,
        max_tokens_limit=max_tokens_limit,
        decode_steps=fields.integer("decode_steps", defaults.decode_steps, 1),
    )


def parse_openai(fields: Fields, model_name: str) -> OpenAISettings:
    """The model's `openai:` block; `served_name` defaults to the model's name."""
    served_name = fields.opt_text(
        "served_name", _SERVED_NAME, "a name of letters, digits and . _ : @ + - (at most 128)"
    )
    return OpenAISettings(
        served_name=served_name or model_name,
        chat=fields.boolean("chat", True),
        completions=fields.boolean("completions", True),
        embeddings=fields.boolean("embeddings", False),
    )


def parse_openai_prefix(fields: Fields) -> str:
    """server.yml's `openai.prefix`: "" (the routes at /v1/...) or a path such as /openai (KServe's)."""
    if fields.get("prefix") == "":
        return ""
    prefix = fields.opt_text(
        "prefix", _PREFIX, '"" or a path such as /openai (1 to 4 segments, no trailing /)'
    )
    return prefix or ""
