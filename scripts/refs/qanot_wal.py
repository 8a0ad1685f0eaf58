"""Records what Qanot's own WAL scanner reports, for memtape's differential WAL test.

Runs `qanot.memory.wal_scan` (qanot 2.0.4, installed by `scripts/refs/setup`) over every
message of memtape's labelled set (`wal-labelled.jsonl`) and of the extra cases
(`wal-extra.jsonl`: the issue's triggers and Qanot's known false positives, English and
Uzbek), and writes `crates/memtape-core/tests/data/qanot-wal.jsonl`: a first line naming the
generator and the Qanot version, then one line per message, in input order:

    {"text": "I'm tired", "qanot": ["correction", "proper_noun"]}

`qanot` is the set of categories Qanot's scanner reports for the whole message, in the order
of Qanot's table (correction, proper_noun, preference, decision, specific_value, remember).
The test `tests/wal_qanot.rs` reads the file; it needs no Python. Re-record with

    $(scripts/refs/setup) scripts/refs/qanot_wal.py
"""

import importlib.metadata
import json
import pathlib
import sys

from qanot.memory import wal_scan

QANOT_VERSION = "2.0.4"
ORDER = ["correction", "proper_noun", "preference", "decision", "specific_value", "remember"]
ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "crates" / "memtape-core" / "tests" / "data"
INPUTS = ["wal-labelled.jsonl", "wal-extra.jsonl"]
OUTPUT = DATA / "qanot-wal.jsonl"


def messages():
    """Every message of the input files, in order, each once."""
    seen = set()
    for name in INPUTS:
        for number, line in enumerate((DATA / name).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)["text"]
            except (ValueError, KeyError) as e:
                sys.exit(f"{name} line {number}: {e}")
            if text not in seen:
                seen.add(text)
                yield text


def main():
    version = importlib.metadata.version("qanot")
    if version != QANOT_VERSION:
        sys.exit(f"qanot {version} is installed; this generator records qanot {QANOT_VERSION}")
    lines = [json.dumps({"generator": "scripts/refs/qanot_wal.py", "qanot": version})]
    for text in messages():
        found = {entry.category for entry in wal_scan(text)}
        unknown = found - set(ORDER)
        if unknown:
            sys.exit(f"qanot reported unknown categories {sorted(unknown)} for {text!r}")
        categories = [c for c in ORDER if c in found]
        lines.append(json.dumps({"text": text, "qanot": categories}, ensure_ascii=False))
    OUTPUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{OUTPUT.relative_to(ROOT)}: {len(lines) - 1} messages", file=sys.stderr)


if __name__ == "__main__":
    main()
