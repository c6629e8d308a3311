"""The curated public namespace, as httpx checks its own: ``__all__`` is exactly what
``import effectgate`` exposes, nothing private leaks, and the error tree is whole."""

from __future__ import annotations

import json
import subprocess
import sys

import effectgate

#: Public modules (documented in effectgate's docstring): importing effectgate may bind them.
PUBLIC_MODULES = {"errors", "store", "adapters", "testing", "examples", "bench"}


def _fresh_namespace() -> dict[str, str]:
    """``{name: kind}`` of a fresh ``import effectgate`` (no test has imported anything else)."""
    code = (
        "import effectgate, json, types; print(json.dumps({n: type(v).__name__ for n, v in "
        "vars(effectgate).items()}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return dict(json.loads(out.stdout))


def test_all_is_exactly_the_public_namespace() -> None:
    names = _fresh_namespace()
    public = {n for n in names if not n.startswith("_")}
    extra = {n for n in public - set(effectgate.__all__) if n not in PUBLIC_MODULES}
    assert extra == set(), f"leaked into the namespace: {sorted(extra)}"
    assert all(names[n] == "module" for n in public - set(effectgate.__all__))
    assert "annotations" not in names
    missing = [n for n in effectgate.__all__ if n not in names]
    assert missing == []
    assert list(effectgate.__all__) == sorted(effectgate.__all__)


def test_private_modules_are_underscored() -> None:
    """One privacy convention: what is not public is ``_name``."""
    from pathlib import Path

    root = Path(effectgate.__file__).parent
    top = {
        p.stem
        for p in root.iterdir()
        if (p.suffix == ".py" or p.is_dir())
        and not p.name.startswith(("_", "."))
        and p.name != "py.typed"
    }
    assert top <= PUBLIC_MODULES | {"integrations"}, sorted(top - PUBLIC_MODULES)


def test_errors_share_one_tree_with_stable_codes() -> None:
    errors = [
        getattr(effectgate, n)
        for n in effectgate.__all__
        if isinstance(getattr(effectgate, n), type)
        and issubclass(getattr(effectgate, n), BaseException)
    ]
    assert errors and all(issubclass(e, effectgate.EffectgateError) for e in errors)
    codes = [e.code for e in errors]
    assert len(codes) == len(set(codes)), "every error has its own code"


def test_the_starter_imports_only_public_names() -> None:
    from effectgate._service._starter import _CLASSES

    imports = [line for line in _CLASSES.splitlines() if "import" in line and "effectgate" in line]
    assert imports and all("._" not in line for line in imports)
