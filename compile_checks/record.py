"""Compile verdicts keyed by the program (`make tpu-check`, `make gpu-check`).

A compile for a given target (a TPU slice and libtpu, or a GPU target config
and jax's CUDA plugin) is a pure function of the lowered program. So the
checks keep a committed record, `.ci/compile_record.json`: per case its
preset, topology and overrides, the compiler versions, a hash of the lowered
StableHLO, and XLA's verdict and memory. Lowering takes seconds where a
compile takes minutes; a case whose program and compiler versions are
recorded takes the recorded verdict, any other compiles for real, and in the
default mode ("check", CI) fails: the record is stale or absent for it.

The hash is of the exact StableHLO text without debug locations (no file
paths: a clone elsewhere lowers to the same text; no constant blanked, so
SHAKE's bf variants each have their own hash). The record cannot vouch for
a program it did not see: a changed step, preset, jax/flax/optax release or
compiler version lowers to another hash or versions and compiles again, and
a verdict edited by hand is only ever taken for the program it was
recorded with. The check venvs pin these versions (.ci/*-constraints.txt),
so CI lowers what the record saw.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os

# the checkout the checks run from: the record and the H100 target are in its .ci/
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(CHECKOUT, ".ci", "compile_record.json")
MODES = ("check", "write", "refresh")
# what compiles the program, per check: the versions a verdict holds for
COMPILERS = {"tpu": ("jax", "jaxlib", "libtpu"),
             "gpu": ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt",
                     "nvidia-cuda-nvcc", "nvidia-nvjitlink", "nvidia-cudnn-cu13")}
# environment variables that change what XLA does with the same program
FLAG_VARIABLES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS")


@contextlib.contextmanager
def without_locations():
    """Lower with no source locations. `debug_info=False` leaves them out of
    the StableHLO text, but a Pallas kernel for TPU carries its Mosaic body
    as serialized MLIR whose locations name files and lines: a clone in
    another folder, or a comment added above a model's line, would hash
    differently. With no traceback frames kept, only op names remain."""
    import jax
    before = jax.config.jax_traceback_in_locations_limit
    jax.config.update("jax_traceback_in_locations_limit", 0)
    try:
        yield
    finally:
        jax.config.update("jax_traceback_in_locations_limit", before)


def program_hash(lowered) -> str:
    """sha256 of the lowered StableHLO (lowered under `without_locations`)."""
    text = lowered.as_text(debug_info=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def compiler_versions(kind: str, target_config: str | None = None) -> dict:
    """{package: version} of what compiles for `kind` ("tpu" | "gpu"), the
    GPU target config's hash, and any XLA flags set in the environment."""
    if kind not in COMPILERS:
        raise ValueError(f"compiler kind {kind!r}; choose one of {sorted(COMPILERS)}")
    versions = {}
    for package in COMPILERS[kind]:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    if target_config is not None:
        versions["target"] = "sha256:" + hashlib.sha256(target_config.encode()).hexdigest()[:16]
    for name in FLAG_VARIABLES:
        if os.environ.get(name):
            versions[name] = os.environ[name]
    return versions


def case_id(kind: str, preset: str, topology: str, overrides=()) -> str:
    """The record's key: "tpu bert_s v3-8 model.shake_factor=0.3 ..."."""
    return " ".join([kind, preset, topology, *overrides])


class Record:
    """The committed verdicts, by case id (one JSON object a line)."""

    def __init__(self, path: str):
        self.path, self.entries = path, {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                try:
                    rows = json.load(f)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} is not the compile record's JSON ({e}); "
                                     f"restore it with git or rewrite it (RECORD=write)") from None
            self.entries = {row["case"]: row for row in rows}

    def match(self, case: str, program: str, versions: dict) -> tuple[dict | None, str]:
        """(the recorded entry, "") when it holds for this program and these
        compiler versions, else (None, why not) in a few words."""
        entry = self.entries.get(case)
        if entry is None:
            return None, "absent"
        if entry["program"] != program:
            return None, "stale: the lowered program changed"
        if entry["versions"] != versions:
            changed = sorted(set(entry["versions"]) | set(versions))
            what = ", ".join(f"{k} {entry['versions'].get(k, '—')} → {versions.get(k, '—')}"
                             for k in changed if entry["versions"].get(k) != versions.get(k))
            return None, f"stale: the compiler changed ({what})"
        return entry, ""

    def put(self, entry: dict) -> None:
        self.entries[entry["case"]] = entry

    def save(self, kind: str | None = None, keep=None) -> None:
        """Rewrite the file sorted by case, one case a line (diffs read as
        cases). `keep`: the ids of the `kind` cases still checked; that kind's
        others are dropped (another check's cases stay)."""
        rows = [self.entries[k] for k in sorted(self.entries)
                if keep is None or k in keep or not k.startswith(f"{kind} ")]
        text = "[\n" + ",\n".join(json.dumps(r, sort_keys=True, ensure_ascii=False)
                                  for r in rows) + "\n]\n"
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, self.path)


def make_entry(case: str, preset: str, topology: str, overrides, program: str,
               versions: dict, verdict: dict, date: str) -> dict:
    return {"case": case, "preset": preset, "topology": topology, "overrides": list(overrides),
            "program": program, "versions": versions, "verdict": verdict, "date": date}


def settle(record: Record, case: str, program: str, versions: dict, mode: str, compile_fn):
    """(verdict, status, failure) for one lowered case. status: "recorded"
    (taken from the record) or "compiled"; failure: None, or the line CI
    fails with (mode "check" and no matching entry: compiled to show what
    XLA says now, but the record must be rewritten and committed)."""
    if mode not in MODES:
        raise ValueError(f"record mode {mode!r}; choose one of {MODES}")
    entry, why = record.match(case, program, versions)
    if entry is not None and mode != "refresh":
        return entry["verdict"], "recorded", None
    verdict = compile_fn()
    failure = None if mode != "check" else (
        f"record {why} for {case}: run `make {case.split()[0]}-check RECORD=write` and "
        f"commit {os.path.relpath(record.path)}")
    return verdict, "compiled", failure
