"""The safe size-expression language (svod_min.expr): what it accepts and what it refuses."""

from __future__ import annotations

import pytest

from svod_min.error import PlanError
from svod_min.expr import SizeExpr, compile_expr, evaluate


@pytest.mark.parametrize(
    "text, env, value, names",
    [
        ("n", {"n": 7}, 7, {"n"}),
        ("(n+255)//256", {"n": 1000}, 4, {"n"}),
        ("(n + 255) // 256", {"n": 256}, 1, {"n"}),
        ("max(1, n*m)", {"n": 0, "m": 5}, 1, {"n", "m"}),
        ("max(1, n*m)", {"n": 3, "m": 5}, 15, {"n", "m"}),
        ("min(n, 4, m)", {"n": 9, "m": 6}, 4, {"n", "m"}),
        ("-n+3", {"n": 5}, -2, {"n"}),
        ("+n", {"n": 5}, 5, {"n"}),
        ("n % 4", {"n": 10}, 2, {"n"}),
        ("n - 1", {"n": 1}, 0, {"n"}),
        ("42", {}, 42, set()),
        ("  n  ", {"n": 2}, 2, {"n"}),
    ],
)
def test_valid_expressions(text: str, env: dict, value: int, names: set) -> None:
    expr = compile_expr(text)
    assert isinstance(expr, SizeExpr)
    assert expr(env) == value
    assert set(expr.names) == names
    assert evaluate(text, env) == value


def test_ints_and_caching() -> None:
    assert compile_expr(5)({}) == 5
    assert compile_expr("n*2") is compile_expr("n*2")
    assert "n*2" in repr(compile_expr("n*2"))


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "n.x",
        "n ** 2",
        "n / 2",
        "lambda: 1",
        "'a'",
        "1.5",
        "n if n else 1",
        "[n]",
        "f(n)",
        "max(n)",  # one argument: an iterable call in Python, refused here
        "max(n, key=m)",
        "n < 2",
        "n and m",
        "True",
        "n << 2",
        "(n, m)",
        "",
        "n +",
        "x" * 600,
    ],
)
def test_rejected_expressions(text: str) -> None:
    with pytest.raises(PlanError):
        compile_expr(text)


def test_rejection_names_the_problem() -> None:
    with pytest.raises(PlanError, match="Pow"):
        compile_expr("n ** 2")
    with pytest.raises(PlanError, match="call to f"):
        compile_expr("f(n)")
    with pytest.raises(PlanError, match="longer than"):
        compile_expr("n+" * 300 + "1")
    with pytest.raises(PlanError, match="int or a string"):
        compile_expr(1.5)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="int or a string"):
        compile_expr(True)  # type: ignore[arg-type]


def test_unknown_variable_is_named() -> None:
    expr = compile_expr("(n + rows) // 2")
    with pytest.raises(PlanError, match="unknown variable 'rows'"):
        expr({"n": 4})


@pytest.mark.parametrize("text", ["n // m", "n % m"])
def test_division_by_zero(text: str) -> None:
    with pytest.raises(PlanError, match="divides by zero"):
        compile_expr(text)({"n": 4, "m": 0})


@pytest.mark.parametrize("n, d, expect", [(9, 4, 3), (8, 4, 2), (0, 4, 0), (1, 256, 1), (-5, 2, -2)])
def test_ceildiv_rounds_up_as_the_kernel_library_does(n: int, d: int, expect: int) -> None:
    assert compile_expr("ceildiv(n, d)")({"n": n, "d": d}) == expect == -(-n // d)


def test_ceildiv_checks_arity_and_division_by_zero() -> None:
    for text in ("ceildiv(n)", "ceildiv(n, 2, 3)", "ceildiv(n, d=2)"):
        with pytest.raises(PlanError, match=r"ceildiv\(\) takes 2 arguments, got"):
            compile_expr(text)
    with pytest.raises(PlanError, match="divides by zero"):
        compile_expr("ceildiv(n, 0)")({"n": 1})


def test_deep_nesting_is_a_plan_error() -> None:
    for text in ("-" * 400 + "n", "(" * 300 + "n" + ")" * 200):
        try:
            compile_expr(text)
        except PlanError:
            continue  # refused with our error: fine
        assert compile_expr(text)({"n": 3}) in (3, -3)  # or accepted and right


# --- the kernel library's dialect: conditions=True (comparisons, and/or, if-else) ---------------

from svod_min.error import KernelParamError  # noqa: E402
from svod_min.kernels import sig as ksig  # noqa: E402


@pytest.mark.parametrize(
    "text, env, value",
    [
        ("n >= 0", {"n": 0}, True),
        ("n >= 0", {"n": -1}, False),
        ("n > 2", {"n": 2}, False),
        ("n < 2", {"n": 1}, True),
        ("n <= 2", {"n": 3}, False),
        ("n == m", {"n": 3, "m": 3}, True),
        ("n != m", {"n": 3, "m": 3}, False),
        ("0 <= n < m", {"n": 2, "m": 3}, True),
        ("0 <= n < m", {"n": 3, "m": 3}, False),
        ("0 <= n < m", {"n": -1, "m": 3}, False),
        ("n and m", {"n": 0, "m": 5}, 0),
        ("n and m", {"n": 2, "m": 5}, 5),
        ("n or m", {"n": 0, "m": 5}, 5),
        ("n or m", {"n": 4, "m": 5}, 4),
        ("n > 0 and m > 0 or k", {"n": 0, "m": 1, "k": 7}, 7),
        ("n if n else 1", {"n": 0}, 1),
        ("n if n else 1", {"n": 6}, 6),
        ("(n + 1) * 2 if n >= 0 else -n", {"n": -3}, 3),
        ("H+2*ph-dh*(KH-1)-1 >= 0", {"H": 4, "ph": 0, "dh": 1, "KH": 5}, False),
        ("ceildiv(n, 64)", {"n": 65}, 2),
        ("max(1, min(ceildiv(n, 256), 65535))", {"n": 10**9}, 65535),
    ],
)
def test_conditions_dialect(text: str, env: dict, value: object) -> None:
    got = compile_expr(text, conditions=True)(env)
    assert got == value and type(got) is type(value)
    assert ksig.compile_expr(text)(env) == value


def test_conditions_short_circuit_and_evaluate_each_operand_once() -> None:
    # the unevaluated branch may divide by zero or name a missing variable: never reached
    assert compile_expr("n == 0 or m // n > 1", conditions=True)({"n": 0, "m": 1}) is True
    assert compile_expr("n != 0 and m // n > 1", conditions=True)({"n": 0, "m": 1}) is False
    assert compile_expr("1 if n else missing", conditions=True)({"n": 1}) == 1
    assert compile_expr("0 < n < 1 // n", conditions=True)({"n": 0}) is False


@pytest.mark.parametrize("text", ["n < 2", "n and m", "n or m", "n if n else 1", "0 <= n < m"])
def test_plan_dialect_still_refuses_conditions(text: str) -> None:
    with pytest.raises(PlanError, match="not allowed"):
        compile_expr(text)
    assert compile_expr(text, conditions=True).text == text


@pytest.mark.parametrize(
    "text, why",
    [
        ("n.real", "Attribute"),
        ("n.__class__", "Attribute"),
        ("f(n)", "call to f"),
        ("abs(n)", "call to abs"),
        ("__import__('os')", "call to __import__"),
        ("ceildiv.x(n)", "Call is not allowed"),
        ("n ** 2", "Pow"),
        ("2 ** 100000000", "Pow"),
        ("n / 2", "Div"),
        ("not n", "UnaryOp"),
        ("n in m", "Compare"),
        ("n is m", "Compare"),
        ("True", "constant True"),
        ("1.5", "constant 1.5"),
        ("'a'", "constant 'a'"),
        ("n[0]", "Subscript"),
        ("lambda: 1", "Lambda"),
        ("(n := 2)", "NamedExpr"),
        ("max(n)", r"max\(\) takes 2 or more arguments, got 1"),
        ("min(n, key=m)", r"min\(\) takes 2 or more arguments, got keywords"),
        ("ceildiv(n)", r"ceildiv\(\) takes 2 arguments, got 1"),
        ("ceildiv(n, 2, 3)", r"ceildiv\(\) takes 2 arguments, got 3"),
        ("n <<", "not valid"),
        ("n +" * 300 + "1", "longer than"),
    ],
)
def test_conditions_dialect_refusals(text: str, why: str) -> None:
    with pytest.raises(PlanError, match=why):
        compile_expr(text, conditions=True)
    with pytest.raises(KernelParamError, match=why):  # the library's spelling raises its own class
        ksig.compile_expr(text)


@pytest.mark.parametrize("text", ["n // m", "n % m", "ceildiv(n, m)", "1 if n // m else 0"])
def test_library_division_by_zero_is_a_kernel_param_error(text: str) -> None:
    with pytest.raises(KernelParamError, match="divides by zero"):
        ksig.compile_expr(text)({"n": 4, "m": 0})


def test_library_missing_variable_is_a_kernel_param_error() -> None:
    with pytest.raises(KernelParamError, match="unknown variable 'rows'"):
        ksig.compile_expr("rows * cols")({"cols": 2})
    with pytest.raises(KernelParamError, match="int or a string"):
        ksig.compile_expr(1.5)  # type: ignore[arg-type]


def test_error_class_and_dialect_are_part_of_the_cache_key() -> None:
    plan, lib = compile_expr("n*3"), compile_expr("n*3", conditions=True, error=KernelParamError)
    assert plan is not lib and plan is compile_expr("n*3") and ksig.compile_expr("n*3") is ksig.compile_expr("n*3")
    with pytest.raises(PlanError) as info:
        plan({})
    assert type(info.value) is PlanError
    with pytest.raises(KernelParamError):
        lib({})


def test_ints_compile_in_every_dialect() -> None:
    assert ksig.compile_expr(7)({}) == 7
    assert ksig.eval_dim(7, {}) == 7 and ksig.eval_dim("ceildiv(n, 2)", {"n": 5}) == 3


def test_every_library_signature_expression_compiles_over_its_variables() -> None:
    """Counts, launch sizes, costs and checks of the whole catalogue are in the library dialect."""
    from svod_min.kernels._generated import signatures

    rows = list(signatures.KERNELS) + list(signatures.CUDA_KERNELS)
    assert rows
    for row in rows:
        variables = {v[0] for v in row["vars"]}
        texts = [b[3] for b in row["buffers"]] + list(row.get("checks", ()))
        texts += [row.get(k, "0") for k in ("flops", "bytes", "work", "parallelism")]
        texts += [d for d in row.get("global_size", row.get("grid", ())) if isinstance(d, str)]
        for text in texts:
            compiled = ksig.compile_expr(text)
            assert compiled.names <= variables, (row["name"], text)
            assert isinstance(compiled({v: 3 for v in variables}), int)


def test_a_caller_names_its_own_error_class() -> None:
    """A device's launch check gets its own class, at compile and at evaluation time."""
    from svod_min.error import LaunchConfigError

    with pytest.raises(LaunchConfigError, match="not valid"):
        compile_expr("n +", error=LaunchConfigError)
    with pytest.raises(LaunchConfigError, match="unknown variable 'm'"):
        compile_expr("m * 2", error=LaunchConfigError)({"n": 1})
    with pytest.raises(LaunchConfigError, match=r"max\(\) takes 2 or more arguments"):
        compile_expr("max(n)", error=LaunchConfigError)
    assert compile_expr("max(1, ceildiv(n, 256))", error=LaunchConfigError).names == {"n"}
