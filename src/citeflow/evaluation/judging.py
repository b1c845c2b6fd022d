"""The citation judge's answers, cached on disk, so that a re-run of ``citeflow eval`` with the
judge on (``CITEFLOW_CITATION_JUDGE``) asks the LLM nothing it has asked before.

One JSON file per judge model and prompt (``<eval cache>/judge/<key>.json``), mapping a hash of
(sentence, quote) to the judge's P(Yes) (null: it said neither Yes nor No). The judge itself is
built on the first question the file cannot answer, so a cached run never loads the model.
`settings_judge` is that cache in front of the LLM the settings name (the benches' judge).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from citeflow.citations.judge import Judge, LLMJudge, TokenLogprobs
from citeflow.errors import ConfigError
from citeflow.prompts import CITATION_JUDGE_PROMPT, CITATION_JUDGE_SYSTEM_PROMPT

if TYPE_CHECKING:
    from citeflow.settings import Settings

__all__ = ["CachedJudge", "settings_judge"]


class CachedJudge:
    """A `Judge` that answers from its file first and asks ``make_judge()`` only on a miss.

    ``save_every``: answers asked between writes of the file (an interrupted evaluation loses at
    most that many); `save` writes the rest.
    """

    def __init__(
        self,
        directory: Path,
        model: str,
        make_judge: Callable[[], Judge],
        *,
        save_every: int = 10,
    ) -> None:
        key = hashlib.sha256(
            "\0".join(
                [model, CITATION_JUDGE_SYSTEM_PROMPT, CITATION_JUDGE_PROMPT.get_template()]
            ).encode()
        ).hexdigest()[:16]
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{key}.json"
        try:
            loaded = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            loaded = {}
        self.known: dict[str, float | None] = loaded if isinstance(loaded, dict) else {}
        self.asked = 0
        self._make_judge = make_judge
        self._judge: Judge | None = None
        self._save_every = save_every

    @staticmethod
    def key(sentence: str, quote: str) -> str:
        return hashlib.sha256(f"{sentence}\0{quote}".encode()).hexdigest()

    async def support(self, sentence: str, quote: str) -> float | None:
        key = self.key(sentence, quote)
        if key in self.known:
            return self.known[key]
        if self._judge is None:
            self._judge = self._make_judge()
        answer = await self._judge.support(sentence, quote)
        self.known[key] = answer
        self.asked += 1
        if self.asked % self._save_every == 0:
            self.save()
        return answer

    def save(self) -> None:
        """Write the answers to the file (atomically)."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.known), encoding="utf-8")
        tmp.replace(self.path)


@contextmanager
def settings_judge(settings: Settings, directory: Path) -> Iterator[CachedJudge]:
    """The LLM ``settings`` name as the citation judge, behind the cache file `citeflow eval`
    keeps for it (named by `describe_llm`): the LLM is built on the first question the file
    cannot answer and closed on exit, when the file is saved.

    Raises:
        ConfigError: (on a question) the LLM gives no first-token log-probabilities.
    """
    from citeflow.providers.llm import build_llm, describe_llm

    owned: list[Any] = []

    def make_judge() -> LLMJudge:
        llm = build_llm(settings)
        owned.append(llm)
        if not isinstance(llm, TokenLogprobs):
            raise ConfigError(f"the LLM ({describe_llm(settings)}) gives no log-probabilities")
        return LLMJudge(llm)

    cache = CachedJudge(directory, describe_llm(settings), make_judge)
    try:
        yield cache
    finally:
        cache.save()
        for llm in owned:
            close = getattr(llm, "close", None)
            if callable(close):
                close()
