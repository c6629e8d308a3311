"""The curated public namespace: everything in __all__ exists, and the list is kept sorted."""

from __future__ import annotations

import effectgate


def test_all_names_exist_and_are_sorted() -> None:
    missing = [name for name in effectgate.__all__ if not hasattr(effectgate, name)]
    assert missing == []
    assert list(effectgate.__all__) == sorted(effectgate.__all__)


def test_errors_share_one_tree_with_stable_codes() -> None:
    errors = [getattr(effectgate, n) for n in effectgate.__all__
              if isinstance(getattr(effectgate, n), type)
              and issubclass(getattr(effectgate, n), BaseException)]
    assert errors and all(issubclass(e, effectgate.EffectgateError) for e in errors)
    codes = [e.code for e in errors]
    assert len(codes) == len(set(codes)), "every error has its own code"
