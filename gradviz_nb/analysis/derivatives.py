"""Local derivative rules of common ops, with the numbers PyTorch really used plugged in.

For teaching: ``explain(...)`` turns one recorded backward step into lines such as
``grad_a = grad_out * b = 0.5 * 3.0 = 1.5``. Every number comes from the recording (the gradient the
node received, the forward values PyTorch saved or capture observed, and the gradient it sent); the
formula is only the rule's text, never used to compute the result.
"""

from __future__ import annotations

from collections.abc import Sequence

# op -> (forward expression, one (gradient name, formula, numbers template) per input)
# Templates: {g} gradient received, {a} {b} {c} input values, {r} the node's own forward value, {n} elements.
RULES: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "AddBackward0": ("a + b", [("grad_a", "grad_out", "{g}"), ("grad_b", "grad_out", "{g}")]),
    "SubBackward0": ("a - b", [("grad_a", "grad_out", "{g}"), ("grad_b", "-grad_out", "-{g}")]),
    "MulBackward0": ("a * b", [("grad_a", "grad_out * b", "{g} * {b}"), ("grad_b", "grad_out * a", "{g} * {a}")]),
    "DivBackward0": ("a / b", [("grad_a", "grad_out / b", "{g} / {b}"),
                               ("grad_b", "-grad_out * a / b²", "-{g} * {a} / {b}²")]),
    "PowBackward0": ("a ** p", [("grad_a", "grad_out * p * a ** (p - 1)", "{g} * {p} * {a} ** ({p} - 1)")]),
    "MmBackward0": ("A @ B", [("grad_A", "grad_out @ Bᵀ", ""), ("grad_B", "Aᵀ @ grad_out", "")]),
    "MvBackward0": ("A @ v", [("grad_A", "grad_out ⊗ v", ""), ("grad_v", "Aᵀ @ grad_out", "")]),
    "DotBackward0": ("a · b", [("grad_a", "grad_out * b", ""), ("grad_b", "grad_out * a", "")]),
    "AddmmBackward0": ("bias + A @ B", [("grad_bias", "grad_out (summed over rows)", ""),
                                        ("grad_A", "grad_out @ Bᵀ", ""), ("grad_B", "Aᵀ @ grad_out", "")]),
    "ReluBackward0": ("relu(a)", [("grad_a", "grad_out * (a > 0)", "{g} * ({r} > 0)")]),
    "SigmoidBackward0": ("s = sigmoid(a)", [("grad_a", "grad_out * s * (1 - s)", "{g} * {r} * (1 - {r})")]),
    "TanhBackward0": ("t = tanh(a)", [("grad_a", "grad_out * (1 - t²)", "{g} * (1 - {r}²)")]),
    "ExpBackward0": ("e = exp(a)", [("grad_a", "grad_out * e", "{g} * {r}")]),
    "LogBackward0": ("log(a)", [("grad_a", "grad_out / a", "{g} / {a}")]),
    "SumBackward0": ("sum(a)", [("grad_a", "grad_out, copied to every element of a", "{g}")]),
    "MeanBackward0": ("mean(a)", [("grad_a", "grad_out / n, to every element of a", "{g} / {n}")]),
    "SoftmaxBackward0": ("s = softmax(a)", [("grad_a", "s * (grad_out - Σ grad_out * s)", "")]),
    "LogSoftmaxBackward0": ("log_softmax(a)", [("grad_a", "grad_out - softmax(a) * Σ grad_out", "")]),
    "NllLossBackward0": ("nll_loss(logp, y)", [("grad_logp", "-grad_out / N at the target class, 0 elsewhere", "")]),
}

# Which input of an op each saved tensor is (op -> saved name -> input number): the recording reads a
# consumer's saved input as its producer's forward value, so the rules above get real numbers.
SAVED_INPUT: dict[str, dict[str, int]] = {
    "MulBackward0": {"self": 0, "other": 1},
    "DivBackward0": {"self": 0, "other": 1},
    "PowBackward0": {"self": 0},
    "PowBackward1": {"self": 0, "exponent": 1},
    "MmBackward0": {"self": 0, "mat2": 1},
    "AddmmBackward0": {"mat1": 1, "mat2": 2},
    "LogBackward0": {"self": 0},
    "DotBackward0": {"self": 0, "tensor": 1},
    "MvBackward0": {"self": 0, "vec": 1},
    "BmmBackward0": {"self": 0, "mat2": 1},
}


def _fmt(x: float) -> str:
    return f"{x:.1f}" if float(x).is_integer() and abs(x) < 1e6 else f"{x:.4g}"


def _num(v: Sequence[float] | None) -> str | None:
    return _fmt(v[0]) if v is not None and len(v) == 1 else None


def explain(
    op: str,
    received: Sequence[float] | None,
    inputs: Sequence[Sequence[float] | None],
    own: Sequence[float] | None,
    sent: Sequence[Sequence[float] | None],
    n_elements: int | None = None,
    exponent: float | None = None,
) -> list[str]:
    """Lines for one step: the forward expression and, per input, rule = numbers = PyTorch's result.

    ``received``: the gradient the node got; ``inputs``: forward values of its inputs (by input_nr);
    ``own``: its own forward value; ``sent``: the gradients it produced (by input_nr). Numbers are
    plugged in only where every one of them is a scalar; otherwise the rule is shown alone.
    """
    rule = RULES.get(op)
    if rule is None:
        return []
    expression, per_input = rule
    lines = [f"forward: {expression}"]
    names = {"g": _num(received), "r": _num(own), "n": str(n_elements) if n_elements else None,
             "p": _fmt(exponent) if exponent is not None else None}
    names.update({k: _num(v) for k, v in zip("abc", inputs, strict=False)})
    for i, (grad_name, formula, numbers) in enumerate(per_input):
        if i >= len(sent):
            break
        result = _num(sent[i])
        line = f"{grad_name} = {formula}"
        needed = [key for key in "gabcrnp" if "{" + key + "}" in numbers]
        if numbers and result is not None and all(names.get(k) for k in needed):
            line += f" = {numbers.format(**{k: names[k] for k in needed})} = {result}"
        elif result is not None:
            line += f" = {result}"
        lines.append(line)
    return lines
