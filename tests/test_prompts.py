"""Every prompt renders as the model should read it."""

from __future__ import annotations

import re

import pytest
from llama_index.core.prompts import PromptTemplate

from citeflow import prompts

TEMPLATES = {
    name: value for name, value in vars(prompts).items() if isinstance(value, PromptTemplate)
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_prompt_renders_without_escapes_or_leftover_fields(name: str) -> None:
    template = TEMPLATES[name]
    text = template.format(**{var: f"<{var}>" for var in template.template_vars})
    assert "{{" not in text and "}}" not in text  # LlamaIndex does not unescape doubled braces
    assert not re.search(r"\{[a-z_]+\}", text)
    for var in template.template_vars:
        assert f"<{var}>" in text


def test_grade_prompt_shows_the_json_it_asks_for() -> None:
    text = prompts.GRADE_PROMPT.format(query_str="q", passages_str="p")
    assert '{"relevant": [numbers]}' in text
