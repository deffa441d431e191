#!/usr/bin/env python3
"""Generate fresh configurations (not in the corpus) by deterministic mutation of the corpus.

    ./gen_fresh.py OUT [--count 300] [--seed 2026]
    sudo ./label.py --root OUT                    # label them with upstream's kresctl
    KRES_CONFORMANCE_DIR=OUT cargo test -p knot-resolver --test config_conformance -- --nocapture

Sources are the corpus cases that PyYAML reads as a mapping (the `examples/` are the upstream
reference configs). Each fresh file is one of:
  * combine: sections taken from two or three valid cases (aggregation across sections);
  * swap:    one leaf replaced by a value that the corpus uses for a key of the same name
             somewhere else (valid or not), so realistic values meet new neighbours;
  * confuse: one leaf replaced by a generic tricky value (type and boundary confusion);
  * rekey:   a key renamed (`-` -> `_`, unknown, capitalised) or dropped;
  * listify: a scalar wrapped in a list, a one-item list unwrapped, a list emptied or doubled;
  * with --text-rate: a parser-level change of the YAML text (a tab after a value or in a
    comment, a BOM, CRLF, a `_` duplicate of a top-level key, a date, a big int or a !!set).
Several mutations can stack. Files are YAML, some JSON; duplicates of each other are dropped.
Writes OUT/cases/fresh/NNNN-<mutations>.{yaml,json}. Nothing here knows the expected verdicts.
"""
import argparse
import copy
import json
import os
import random
import re
import shutil

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))

GENERIC = [0, 1, -1, 65535, 65536, 4294967296, 99999999999999999999, 1.5, True, False, None,
           "", " ", "abc", "yes", "0", "10", "10s", "1m", "100M", "1G", "-1s",
           "::1", "127.0.0.1", "127.0.0.1@53", "127.0.0.1@0", "::1@5353", "eth0", "eth0@53",
           "10.0.0.0/8", "10.0.0.1/8", "example.com", "example.com.", "-bad.example", ".",
           "*.example", "/tmp/x", "relative/path", [], ["a"], {}, {"x": 1}]


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except Exception:
        return None
    if not isinstance(data, dict) or not data or not all(isinstance(k, str) for k in data):
        return None
    try:
        json.dumps(data)
    except (TypeError, ValueError):
        return None  # dates, bytes, sets
    return data


def leaves(node, path=()):
    """(path, key, value) of every scalar or list-of-scalars leaf."""
    if isinstance(node, dict):
        for k, v in node.items():
            nested = (isinstance(v, dict) and v) or (isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v))
            if nested:
                yield from leaves(v, path + (k,))
            else:
                yield path + (k,), k, v
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, (dict, list)):
                yield from leaves(v, path + (i,))
            else:
                yield path + (i,), None, v


def containers(node, path=()):
    """(path, dict) of every mapping."""
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from containers(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from containers(v, path + (i,))


def get(node, path):
    for p in path:
        node = node[p]
    return node


def set_at(node, path, value):
    get(node, path[:-1])[path[-1]] = value


def text_mutation(rng, d, text):
    """A change only visible in the YAML text (parser-level quirks)."""
    lines = text.splitlines()
    value_lines = [i for i, l in enumerate(lines) if re.match(r"^\s*(- )?[\w-]+: \S", l)]
    how = rng.choice(["tab-eol", "tab-comment", "bom", "crlf", "dup-underscore", "date", "bigint", "set"])
    if how == "tab-eol" and lines:
        i = rng.randrange(len(lines))
        lines[i] += "\t"
    elif how == "tab-comment" and lines:
        i = rng.randrange(len(lines))
        lines[i] += " #\tcomment"
    elif how == "bom":
        return "\ufeff" + text, how
    elif how == "crlf":
        return text.replace("\n", "\r\n"), how
    elif how == "dup-underscore":
        keys = [k for k in d if "-" in k]
        if keys:
            k = rng.choice(keys)
            extra = yaml.safe_dump({k.replace("-", "_"): d[k]}, sort_keys=False, allow_unicode=True)
            return text + extra, how
    elif how in ("date", "bigint", "set") and value_lines:
        i = rng.choice(value_lines)
        key = lines[i].split(": ", 1)[0]
        lines[i] = key + ": " + {"date": "2020-01-31", "bigint": "123456789012345678901234567890",
                                  "set": "!!set {a, b}"}[how]
    return "\n".join(lines) + "\n", how


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--text-rate", type=float, default=0.0,
                    help="share of YAML files that also get a text-level (parser) mutation")
    args = ap.parse_args()
    rng = random.Random(args.seed)

    with open(os.path.join(HERE, "labels.json"), encoding="utf-8") as f:
        labels = json.load(f)["cases"]
    docs, valid_docs = [], []
    pool = {}  # key name -> values seen in the corpus
    existing = set()
    for rel in sorted(labels):
        path = os.path.join(HERE, rel)
        with open(path, "rb") as f:
            existing.add(f.read())
        data = load(path)
        if data is None:
            continue
        docs.append(data)
        if labels[rel]["valid"]:
            valid_docs.append(data)
        for _p, k, v in leaves(data):
            if k is not None:
                pool.setdefault(k, [])
                if v not in pool[k]:
                    pool[k].append(v)

    def combine():
        picks = rng.sample(valid_docs, rng.randint(2, 3))
        out = {}
        for d in picks:
            for k, v in d.items():
                if k not in out:
                    out[k] = copy.deepcopy(v)
        return out

    def swap(d):
        cands = [(p, k) for p, k, _v in leaves(d) if k in pool and len(pool[k]) > 1]
        if not cands:
            return False
        p, k = rng.choice(cands)
        set_at(d, p, copy.deepcopy(rng.choice(pool[k])))
        return True

    def confuse(d):
        cands = [p for p, _k, _v in leaves(d)]
        if not cands:
            return False
        set_at(d, rng.choice(cands), copy.deepcopy(rng.choice(GENERIC)))
        return True

    def rekey(d):
        cands = [(p, c, k) for p, c in containers(d) for k in c]
        if not cands:
            return False
        _p, c, k = rng.choice(cands)
        how = rng.choice(["underscore", "unknown", "capital", "drop"])
        v = c.pop(k)
        if how == "underscore" and "-" in k:
            c[k.replace("-", "_")] = v
        elif how == "unknown":
            c[k] = v
            c[k + "-x"] = v
        elif how == "capital":
            c[k.capitalize()] = v
        elif how == "drop" and len(c) == 0:
            c[k] = v
            return False
        elif how == "underscore":
            c[k] = v
            return False
        return True

    def listify(d):
        cands = [p for p, _k, _v in leaves(d)]
        if not cands:
            return False
        p = rng.choice(cands)
        v = get(d, p)
        if isinstance(v, list):
            v = rng.choice([v[0] if len(v) == 1 else [], [], v + v])
        else:
            v = [v]
        set_at(d, p, v)
        return True

    mutations = {"swap": swap, "confuse": confuse, "rekey": rekey, "listify": listify}
    out_cases = os.path.join(args.out, "cases", "fresh")
    if os.path.exists(out_cases):
        shutil.rmtree(out_cases)
    os.makedirs(out_cases)
    seen = set(existing)
    n = 0
    attempts = 0
    while n < args.count and attempts < args.count * 50:
        attempts += 1
        if rng.random() < 0.25:
            d, names = combine(), ["combine"]
        else:
            d, names = copy.deepcopy(rng.choice(docs)), []
        for _ in range(rng.choice([1, 1, 1, 2, 3]) if names == [] else rng.choice([0, 1])):
            name = rng.choice(list(mutations))
            if mutations[name](d):
                names.append(name)
        if not names:
            continue
        as_json = rng.random() < 0.1
        if as_json:
            text = json.dumps(d, ensure_ascii=False, indent=1) + "\n"
        else:
            text = yaml.safe_dump(d, sort_keys=False, allow_unicode=True, default_flow_style=False)
        if not as_json and rng.random() < args.text_rate:
            text, tname = text_mutation(rng, d, text)
            names.append(tname)
        raw = text.encode("utf-8")
        if raw in seen:
            continue
        seen.add(raw)
        n += 1
        ext = "json" if as_json else "yaml"
        with open(os.path.join(out_cases, f"{n:04d}-{'-'.join(names)}.{ext}"), "wb") as f:
            f.write(raw)
    print(f"wrote {n} configurations to {out_cases}")


if __name__ == "__main__":
    main()
