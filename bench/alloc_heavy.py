"""An allocation-heavy CPython workload for the bench, meant to run with PYTHONMALLOC=malloc so
that every object allocation reaches malloc: it builds and drops dicts, lists, tuples, strings
and integers the way ordinary Python code does, a few million allocations in all."""

import json
import sys


def records(n):
    out = []
    for i in range(n):
        out.append({"id": i, "name": "item-%d" % i, "tags": [str(i % 7), str(i % 11)], "score": i * 0.5})
    return out


def churn(rounds, n):
    total = 0
    for r in range(rounds):
        recs = records(n)
        text = json.dumps(recs)
        back = json.loads(text)
        index = {rec["name"]: rec for rec in back}
        words = " ".join(rec["name"] for rec in back).split()
        words.sort(key=lambda w: w[::-1])
        total += len(index) + len(words) + sum(len(t) for rec in back for t in rec["tags"])
        pairs = [(k, v["score"]) for k, v in index.items() if v["id"] % 3]
        total += len(pairs)
    return total


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    print("python workload:", churn(rounds, 20000))
