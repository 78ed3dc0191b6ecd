"""A small dataset and a tokenizer for torchtitan's llama3 debug model, generated here (no C4 text vendored).

`python make_assets.py OUT` (with the torchtitan venv's python: it uses `tokenizers`, a torchtitan dependency)
writes OUT/data/data.json (one {"text": ...} per line, about 1 MB of synthetic sentences from a fixed seed)
and OUT/tokenizer/{tokenizer.json,tokenizer_config.json} (a byte-level BPE trained on that text, vocabulary
under the debug model's 2048). The same OUT twice gives the same files.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

WORDS = [
    "lamp",
    "light",
    "keeper",
    "tower",
    "harbour",
    "ship",
    "night",
    "storm",
    "signal",
    "wick",
    "oil",
    "glass",
    "beam",
    "rock",
    "shore",
    "tide",
    "wave",
    "wind",
    "watch",
    "log",
    "record",
    "bell",
    "fog",
    "cliff",
    "island",
    "keeper's",
    "stair",
    "lens",
    "flame",
    "spark",
    "ember",
    "dawn",
    "dusk",
    "north",
    "south",
    "east",
    "west",
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "on",
    "at",
    "by",
    "with",
    "from",
    "under",
    "over",
    "through",
    "after",
    "before",
    "while",
    "because",
]


def sentences(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(40, 120))]
        out.append(" ".join(words).capitalize() + ".")
    return out


def main(out: Path) -> None:
    rng = random.Random(28)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    docs = sentences(rng, 2500)
    (data / "data.json").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    folder = out / "tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": specials[0], "eos_token": specials[1], "add_bos_token": True}, indent=1)
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
