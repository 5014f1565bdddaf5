#!/usr/bin/env python3
"""make_repeat_set.py — writes bench/repeat.jsonl, the repetition set of `spex bench spec`.

Each prompt is a finished conversation from models/demo.jsonl (a problem, its worked answer)
followed by the same question asked again: the continuation quotes text the prompt already
holds, as code edits, RAG answers and quotes of a document do. It is the workload where
n-gram lookup and the hybrid drafter can propose long runs that a DFlash block cannot reach.

usage: python3 bench/make_repeat_set.py [N]   (default 16 prompts; run from the repository root)
"""
import json
import sys


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    rows = []
    with open("models/demo.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            again = "<|im_start|>user\n" + d["user"] + "<|im_end|>\n<|im_start|>assistant\n"
            rows.append({"prompt": d["text"] + "\n" + again})
            if len(rows) == n:
                break
    with open("bench/repeat.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"bench/repeat.jsonl: {len(rows)} prompts")


if __name__ == "__main__":
    main()
