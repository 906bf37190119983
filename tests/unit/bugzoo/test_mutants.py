"""The mutant generator: its truth is PyTorch's, its draws are seeded, and the doctor names >= 95% of them.

The first tests check the method (statuses from known tensors, coverage of targets, determinism, every
family planting a bug somewhere); the last runs the fixed seed over 240 mutants (a slow test).
"""

from __future__ import annotations

import json

import pytest
import torch

from gradviz_nb.bugzoo.__main__ import mutants_line
from gradviz_nb.bugzoo.mutants import FAMILIES, HOSTS
from gradviz_nb.bugzoo.mutants.runner import RESULTS, run
from gradviz_nb.bugzoo.mutants.score import covered
from gradviz_nb.bugzoo.mutants.truth import _run, make, measure, status

G = torch.tensor([1.0, -2.0, 3.0])
V0, V1 = torch.zeros(3), torch.ones(3)


@pytest.mark.parametrize(("mut", "host", "start_m", "expected"), [
    ((None, V1), (G, V1), V0, "none"),
    ((torch.zeros(3), V1), (G, V1), V0, "zero"),
    ((G * 1e-9, V1), (G, V1), V0, "vanished"),
    ((G * 2, V1), (G, V1), V0, "scaled"),
    ((G.clone(), V0), (G, V1), V0, "stuck"),
    ((G.clone(), V1 * 2), (G, V1), V0, "update"),
    ((G.flip(0), V1), (G, V1), V0, "changed"),
    ((G.clone(), V1), (G, V1), V0, "same"),
])
def test_status_reads_the_gradient_against_the_host(mut: tuple[torch.Tensor | None, torch.Tensor],
                                                    host: tuple[torch.Tensor, torch.Tensor], start_m: torch.Tensor,
                                                    expected: str) -> None:
    assert status(mut, host, start_m, V0) == expected


def test_status_of_a_parameter_only_the_mutant_has() -> None:
    assert status((None, V0), None, V0, None) == "none"
    assert status((G, V0), None, V0, None) == "same"


def test_covered_targets() -> None:
    universe = {"a.w", "a.b", "ab.w", "c.w"}
    aliases = {"tied.w": "c.w", "c.w": "c.w"}
    assert covered("a", universe, aliases) == {"a.w", "a.b"}  # a module path, not a name prefix ("ab")
    assert covered("a.w", universe, aliases) == {"a.w"}
    assert covered("tied.w", universe, aliases) == {"c.w"}
    assert covered("(model)", universe, aliases) == universe
    assert covered("moe.aux", universe, aliases) == set()


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_host_against_itself_has_no_effect(host: str) -> None:
    """The truth's base: two builds of one host from one seed give bit-identical steps."""
    fam = FAMILIES["detach"]
    a, b = make(fam, host, 3, False), make(fam, host, 3, False)
    assert a is not None and b is not None
    start_a, steps_a = _run(a, 2)
    start_b, steps_b = _run(b, 2)
    for k in range(2):
        for name, rec in steps_a[k].items():
            assert status(rec, steps_b[k][name], start_a[name][1], start_b[name][1]) == "same", (host, name)


def test_draws_are_seeded() -> None:
    first = measure(FAMILIES["saturated"], "mlp", 11)
    again = measure(FAMILIES["saturated"], "mlp", 11)
    assert first is not None and again is not None
    assert (first.site, first.statuses) == (again.site, again.statuses)
    sites = {t.site for s in range(8) if (t := measure(FAMILIES["detach"], "vit", s)) is not None}
    assert len(sites) > 2, sites  # the site really is drawn


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_plants_a_bug_pytorch_sees(family: str) -> None:
    """Within a few draws on the hosts it applies to, the family changes some parameter's fate."""
    fam = FAMILIES[family]
    for seed in range(12):
        host = sorted(HOSTS)[seed % len(HOSTS)] if family != "dead-adapter" else "hf-lora"
        if host == "hf-lora" and family not in ("dead-adapter", "double-backward"):
            continue
        truth = measure(fam, host, seed)
        if truth is not None and not truth.error and truth.affected:
            assert truth.affected <= truth.universe
            return
    pytest.fail(f"{family}: no draw had an effect")


def test_doctor_names_mutants() -> None:
    """The fixed seed over 240 mutants and the healthy recipes: results.json holds this run's counts, and the
    doctor names >= 95% of the original families' mutants (the tuned and held-out halves are reported)."""
    result = run(0, 240, recipes=True)
    assert len(result.results) >= 200
    misses = [f"#{r.index} {r.family} on {r.host}: {r.truth.site} | {r.score.summary[:200]}"
              for r in result.results if not r.score.named]
    saved = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else None
    stale = "results.json is stale: python -m gradviz_nb.bugzoo.mutants --seed 0 --n 240 --save"
    assert saved == result.summary(), stale
    assert "Mutants named" in mutants_line()
    named, total = result.summary()["halves"]["original"]  # type: ignore[index]
    assert named >= 0.95 * total, "\n".join(misses[:40])
    assert "held-out half" in mutants_line()


def test_judge_needs_cover_of_the_right_kind_and_nothing_false() -> None:
    from gradviz_nb.bugzoo.mutants.score import judge
    from gradviz_nb.bugzoo.mutants.truth import Truth
    from gradviz_nb.doctor import Diagnosis, Finding

    fam = FAMILIES["detach"]
    truth = Truth("a: out.detach()", affected={"a.w", "a.b"}, universe={"a.w", "a.b", "c.w", "lora.A"},
                  unknown={"lora.A"})

    def dx(*found: tuple[str, str]) -> Diagnosis:
        return Diagnosis([Finding(k, t, "m", "e", "f") for k, t in found], 2, True)  # type: ignore[arg-type]

    assert judge(fam, truth, dx(("detached", "a"))).named
    assert not judge(fam, truth, dx(("detached", "a.w"))).named  # a.b not covered
    assert not judge(fam, truth, dx(("no-grad", "a"))).named  # wrong kind
    assert not judge(fam, truth, dx(("detached", "a"), ("vanishing", "c.w"))).named  # false on c.w
    assert not judge(fam, truth, dx(("detached", "a"), ("not-a-parameter", "moe.aux"))).named  # names no parameter
    assert judge(fam, truth, dx(("detached", "a"), ("detached", "lora.A"))).named  # step 1 cannot tell


def test_classes_after_the_original_are_split_by_a_fixed_rule() -> None:
    """The halves were fixed (first bit of SHA-256 of the class name) before any rule for them was written."""
    import hashlib

    from gradviz_nb.bugzoo.mutants.split import ORIGINAL, half

    new = sorted(f for f in FAMILIES if f not in ORIGINAL)
    assert len(ORIGINAL) == 22 and set(FAMILIES) >= ORIGINAL and len(new) >= 20
    for name in new:
        assert half(name) == ("tuned" if hashlib.sha256(name.encode()).digest()[0] % 2 == 0 else "held-out")
    assert [f for f in new if half(f) == "held-out"] == [
        "clip-before-unscale", "clip-value-to-nothing", "cut-copy-constructor", "cut-index-op", "grad-edited",
        "grad-mode-off", "loss-weight-zero", "scaler-bypassed", "zero-constant-output"]


def test_truth_measures_the_mutations_source_lines() -> None:
    """The lines the mutant's steps ran and the host's did not: the planted detach's own line; a mutation made
    before the step (a frozen parameter) has none."""
    import inspect

    from gradviz_nb.bugzoo.mutants import ops_forward

    truth = next(t for s in range(8) if (t := measure(FAMILIES["detach"], "mlp", s)) is not None and t.affected)
    source, _ = inspect.getsourcelines(ops_forward)
    line = next(i + 1 for i, text in enumerate(source) if "lambda t: t.detach()" in text)
    assert f"ops_forward.py:{line}" in truth.lines
    assert all(x.split(":")[0] in ("ops_forward.py", "plan.py") for x in truth.lines), truth.lines
    frozen = next(t for s in range(8) if (t := measure(FAMILIES["frozen"], "mlp", s)) is not None and t.affected)
    assert frozen.lines == set()
    assert all(frozen.host_norms[n] for n in frozen.affected)  # the host's gradient, for prove()'s comparison


def test_why_score_needs_status_cause_and_line() -> None:
    from gradviz_nb.bugzoo.mutants.truth import Truth
    from gradviz_nb.bugzoo.mutants.why_score import cited_lines, score_why
    from gradviz_nb.doctor import Diagnosis, Finding

    fam = FAMILIES["detach"]
    truth = Truth("a: out.detach()", statuses={"a.w": "none", "c.w": "same"}, affected={"a.w"},
                  universe={"a.w", "c.w"}, lines={"ops.py:7"})

    def dx(kind: str, where: str) -> Diagnosis:
        return Diagnosis([Finding(kind, "a", f"cut by the detach() at /x/{where}", "e", "f")], 2,  # type: ignore[arg-type]
                         True)

    assert cited_lines("at /a/b/ops.py:7 and c.py:12") == {"ops.py:7", "c.py:12"}
    right = score_why(fam, truth, dx("detached", "ops.py:7"), None)
    assert (right.params, right.status, right.cause, right.line, right.right) == (1, 1, 1, 1, 1)
    assert score_why(fam, truth, dx("detached", "ops.py:8"), None).right == 0  # another line
    assert score_why(fam, truth, dx("no-grad", "ops.py:7"), None).right == 0  # another cause
    truth.statuses["a.w"] = "zero"
    assert score_why(fam, truth, dx("detached", "ops.py:7"), None).status == 0  # said none, PyTorch saw zero


def test_why_and_prove_on_a_planted_detach_are_right_against_pytorch() -> None:
    """End to end on one mutant: gv.why names every affected parameter's status, cause and line, and each
    proof gives the host's own gradient."""
    from gradviz_nb.bugzoo.mutants.runner import _draw

    drawn = _draw(0, 43, "detach", "mlp")
    assert drawn is not None
    truth, whys = drawn[4], drawn[6]
    assert truth is not None and whys is not None and truth.affected
    assert (whys.right, whys.proven) == (whys.params, whys.proofs) and whys.proofs == len(truth.affected), whys.wrong
