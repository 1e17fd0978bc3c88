"""Rule-based pruning of the schedule space: programs a rule says are slow never reach the cost model's picks.

A rule looks at one program's PerStoreFeature rows (``cost_model.Featurizer``) and answers whether the
program breaks it. The rules read the row of the program's main computation (the store with the most
floating-point, else integer, arithmetic), in TVM's group-1 layout of per-store features
(``src/meta_schedule/feature_extractor/per_store_feature.cc``): 16 arithmetic counts, then for each of the
loop kinds vectorize / unroll / parallel ``num, prod, len`` and an 8-way position one-hot; every count is
stored as ``log2(x + 1)``.

Pruning acts in two places of the loop: the search's cost model gives a pruned program the lowest score
(so the evolutionary search's model-guided picks skip it), and the predict step drops pruned programs that
reached the round anyway (the search's epsilon-greedy share is picked without the model). A round whose
programs all break some rule is not pruned at all ("waived"): a rule must never stall a search, e.g. on a
workload too small to vectorize. Every decision is counted per rule (``Pruner.counts``).

How much each rule removes, and whether it ever removes a fast program, is measured on the project's own
records by ``benchmarks/cost_model.py`` (docs/results/cost_model.md).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import WorkbenchError

# Group-1 columns of a PerStoreFeature row.
FLOAT_OPS = (0, 1, 2)  # float multiply-add, add/sub, multiply
INT_OPS = (7, 8, 9)
VEC_NUM, VEC_PROD, VEC_LEN = 16, 17, 18
PAR_NUM, PAR_PROD, PAR_LEN = 38, 39, 40


def count(feature: float) -> int:
    """A stored count back from its ``log2(x + 1)`` encoding."""
    return int(round(2.0 ** float(feature) - 1.0))


def main_store_row(rows: np.ndarray) -> np.ndarray:
    """The row of the store doing the most arithmetic: the program's main computation."""
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[0] == 0:
        raise ValueError("a program's features are a non-empty (stores x features) matrix")
    work = rows[:, FLOAT_OPS].max(axis=1)
    if not np.any(work > 0):
        work = rows[:, INT_OPS].max(axis=1)
    return rows[int(np.argmax(work))]


@dataclass(frozen=True)
class Machine:
    """What the rules need to know about the target: SIMD lanes of the computed dtype, and cores."""

    lanes: int
    cores: int

    @classmethod
    def of_target(cls, target, dtype_bits: int = 32) -> "Machine":
        """Lanes from the target CPU's vector extensions (AVX-512: 512 bits, AVX2: 256, else 128)."""
        from tvm.target import codegen

        if codegen.llvm_cpu_has_features(["avx512f"], target):
            bits = 512
        elif codegen.llvm_cpu_has_features(["avx2"], target):
            bits = 256
        else:
            bits = 128
        cores = int(target.attrs["num-cores"]) if "num-cores" in target.attrs else 1
        return cls(lanes=max(1, bits // dtype_bits), cores=max(1, cores))


@runtime_checkable
class PruningRule(Protocol):
    """One rule of the schedule space.

    ``name`` is the rule's stable identifier (preset field ``pruning``, CLI ``--prune``, counts);
    ``violated(main, machine)`` gets the main computation's feature row (``main_store_row``) and returns
    True when the program should not be measured. It must be pure and cheap: it runs on every program the
    evolutionary search scores.
    """

    name: str

    def violated(self, main: np.ndarray, machine: Machine) -> bool: ...


class Unvectorized:
    """The main computation's store sits in no vectorized loop: the CPU's SIMD units stay idle."""

    name = "unvectorized"

    def violated(self, main: np.ndarray, machine: Machine) -> bool:
        return count(main[VEC_NUM]) == 0


class VectorWidth:
    """The innermost vectorized loop is not a whole number of SIMD registers (its extent is not a multiple
    of the lanes): every iteration ends in a partial, masked or scalar remainder."""

    name = "vector-width"

    def violated(self, main: np.ndarray, machine: Machine) -> bool:
        n = count(main[VEC_LEN])
        return n > 0 and n % machine.lanes != 0


class SerialOuter:
    """The main computation's parallel loops have fewer iterations than the machine has cores: some cores
    get no work."""

    name = "serial"

    def violated(self, main: np.ndarray, machine: Machine) -> bool:
        if machine.cores < 2:
            return False
        return count(main[PAR_PROD]) < machine.cores


RULES: dict[str, PruningRule] = {r.name: r for r in (Unvectorized(), VectorWidth(), SerialOuter())}


def parse_rules(spec) -> tuple[str, ...]:
    """``"all"``, ``"none"``/``""``, a comma list or a sequence of rule names -> validated rule names."""
    if spec is None:
        return ()
    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s).strip() for s in spec]
    names = [n for n in names if n and n != "none"]
    if names == ["all"]:
        return tuple(RULES)
    bad = [n for n in names if n not in RULES]
    if bad:
        raise WorkbenchError(f"unknown pruning rule {bad[0]!r}; valid: all, none, {', '.join(RULES)}")
    return tuple(dict.fromkeys(names))


class Pruner:
    """The session's enabled rules, applied to batches of programs and counted.

    ``counts`` maps each rule to the programs it pruned (first rule that fires, in the enabled order),
    plus ``checked`` (programs looked at) and ``waived`` (programs let through because their whole batch
    broke some rule). Thread-safe: the search scores batches on several threads.
    """

    def __init__(self, rules, machine: Machine):
        self.rules = [RULES[n] for n in parse_rules(rules)]
        self.machine = machine
        self._lock = threading.Lock()
        self.counts = {r.name: 0 for r in self.rules} | {"checked": 0, "waived": 0}

    @property
    def enabled(self) -> bool:
        return bool(self.rules)

    def first_violation(self, rows: np.ndarray) -> str | None:
        if rows is None or len(rows) == 0:
            return None
        main = main_store_row(rows)
        for r in self.rules:
            if r.violated(main, self.machine):
                return r.name
        return None

    def check(self, feats: list, count: bool = True) -> list[str | None]:
        """The rule each program breaks (None: kept); all None when every program breaks one (waived).
        ``count=False``: a second look at programs already counted (the loop's predict step)."""
        if not self.rules:
            return [None] * len(feats)
        found = [self.first_violation(f) for f in feats]
        waived = bool(found) and all(found)
        if count:
            with self._lock:
                self.counts["checked"] += len(found)
                if waived:
                    self.counts["waived"] += len(found)
                else:
                    for name in found:
                        if name:
                            self.counts[name] += 1
        return [None] * len(found) if waived else found

    def snapshot(self) -> dict:
        with self._lock:
            return dict(self.counts)


def pruned_scores(scores: np.ndarray, violations: list) -> np.ndarray:
    """Scores with every pruned program moved below all kept ones (their order among themselves kept)."""
    scores = np.asarray(scores, dtype=np.float64).copy()
    mask = np.array([v is not None for v in violations], dtype=bool)
    if mask.any() and (~mask).any():
        floor = float(np.min(scores[~mask]))
        scores[mask] = scores[mask] - float(np.max(scores[mask])) + floor - 1.0
    return scores
