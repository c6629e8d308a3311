"""``effectgate scan``: call sites that make consequential calls without going through the gate.

Each Python file is parsed with :mod:`ast` (never imported or run). Names are resolved through
the module's imports and through simple local bindings (``s = requests.Session()``,
``with smtplib.SMTP(host) as smtp``, ``ec2 = boto3.client("ec2")``), so a call gets a dotted
path such as ``requests.Session.post`` or ``boto3.client.terminate_instances``; paths are
matched against glob patterns (``*`` also crosses dots).

A consequential call is reported unless it sits inside a method of a class deriving from an
effectgate ``Adapter`` (there it *is* the boundary: journalled before, reconciled after).
Calls into the gate itself (``Gate.submit``, ``Service.propose``, an effectgate HTTP or MCP
client) are counted as routed. The lists extend from a TOML file::

    [scan]
    consequential = ["billing.Client.charge", "mycorp.payments.*.refund"]
    gated = ["mycorp.agent.propose"]
"""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from effectgate.errors import ConfigError

__all__ = ["CONSEQUENTIAL", "GATED", "Finding", "ScanReport", "load_rules", "scan_paths"]

_MUTATING_HTTP = ("post", "put", "patch", "delete")
CONSEQUENTIAL: tuple[str, ...] = (
    # stripe: module-level resources and the StripeClient's services
    *(
        f"stripe.*.{verb}"
        for verb in (
            "create", "modify", "delete", "cancel", "capture", "confirm", "pay", "refund",
            "void_invoice", "finalize_invoice", "send_invoice", "update", "close", "reverse",
            "approve", "expire", "mark_uncollectible",
        )
    ),
    # boto3 clients and resources: what creates, deletes, runs or terminates
    *(f"boto3.{kind}.{verb}_*" for kind in ("client", "resource") for verb in (
        "create", "delete", "run", "terminate", "put", "start", "stop", "send", "publish",
        "invoke", "update", "modify",
    )),
    *(f"boto3.{kind}.*.{verb}" for kind in ("resource",) for verb in ("delete", "terminate")),
    "smtplib.SMTP.sendmail", "smtplib.SMTP.send_message",
    "smtplib.SMTP_SSL.sendmail", "smtplib.SMTP_SSL.send_message",
    *(f"requests.{m}" for m in _MUTATING_HTTP),
    *(f"requests.Session.{m}" for m in _MUTATING_HTTP),
    *(f"requests.request:{m.upper()}" for m in _MUTATING_HTTP),
    *(f"requests.Session.request:{m.upper()}" for m in _MUTATING_HTTP),
    *(f"httpx.{m}" for m in _MUTATING_HTTP),
    *(f"httpx.{c}.{m}" for c in ("Client", "AsyncClient") for m in _MUTATING_HTTP),
    *(f"httpx.request:{m.upper()}" for m in _MUTATING_HTTP),
    *(f"httpx.{c}.request:{m.upper()}" for c in ("Client", "AsyncClient") for m in _MUTATING_HTTP),
    # a method given as a variable may be any of them
    "requests.request:?", "requests.Session.request:?", "httpx.request:?",
    "httpx.Client.request:?", "httpx.AsyncClient.request:?",
)  # fmt: skip
GATED: tuple[str, ...] = (
    "effectgate.Gate.submit",
    "effectgate.*Gate.submit",
    "effectgate.*Service.propose",
    "effectgate.*.propose",
)
_ALIASES = {"requests.session": "requests.Session", "boto3.Session.client": "boto3.client"}


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    column: int
    call: str
    rule: str


@dataclass
class ScanReport:
    files: int = 0
    findings: list[Finding] = field(default_factory=list)
    #: Consequential calls inside effectgate adapters (behind the boundary).
    in_adapters: list[Finding] = field(default_factory=list)
    #: Calls into the gate.
    gated: list[Finding] = field(default_factory=list)
    #: Files that could not be parsed: (file, why).
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "ungated": [asdict(f) for f in self.findings],
            "in_adapters": [asdict(f) for f in self.in_adapters],
            "gated": [asdict(f) for f in self.gated],
            "skipped": [{"file": f, "why": w} for f, w in self.skipped],
            "summary": {
                "ungated": len(self.findings),
                "in_adapters": len(self.in_adapters),
                "gated": len(self.gated),
            },
        }


def load_rules(path: str | Path) -> tuple[list[str], list[str]]:
    """Extra ``(consequential, gated)`` patterns from a TOML file's ``[scan]`` table."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read the scan rules: {exc}") from None
    scan = data.get("scan")
    if not isinstance(scan, dict):
        raise ConfigError(f"{file}: needs a [scan] table")
    out: list[list[str]] = []
    for key in ("consequential", "gated"):
        value = scan.pop(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{file}: scan.{key} must be a list of non-empty strings")
        out.append(list(value))
    if scan:
        raise ConfigError(f"{file}: scan.{sorted(scan)[0]}: unknown key")
    return out[0], out[1]


def scan_paths(
    paths: Iterable[str | Path], *, consequential: Iterable[str] = (), gated: Iterable[str] = ()
) -> ScanReport:
    rules = (*CONSEQUENTIAL, *consequential)
    gates = (*GATED, *gated)
    report = ScanReport()
    for file in _python_files(paths):
        report.files += 1
        try:
            tree = ast.parse(file.read_bytes(), filename=str(file))
        except (SyntaxError, ValueError, OSError) as exc:
            report.skipped.append((str(file), type(exc).__name__))
            continue
        _Visitor(str(file), rules, gates, report).visit(tree)
    for bucket in (report.findings, report.in_adapters, report.gated):
        bucket.sort(key=lambda f: (f.file, f.line, f.column))
    return report


def _python_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise ConfigError(f"{path}: no such file or directory")
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*.py")):
            if not any(
                part.startswith(".") or part in ("venv", "node_modules")
                for part in file.relative_to(path).parts[:-1]
            ):
                yield file


def _match(path: str, patterns: Iterable[str]) -> str | None:
    for pattern in patterns:
        if fnmatch.fnmatchcase(path, pattern):
            return pattern
    return None


class _Visitor(ast.NodeVisitor):
    def __init__(
        self, file: str, rules: tuple[str, ...], gates: tuple[str, ...], report: ScanReport
    ) -> None:
        self.file, self.rules, self.gates, self.report = file, rules, gates, report
        self.imports: dict[str, str] = {}  # local name -> dotted module path
        self.bound: dict[str, str] = {}  # local variable -> the constructor's path
        self.adapter_depth = 0

    # -- names ---------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.imports[alias.asname] = alias.name
            else:
                root = alias.name.split(".")[0]
                self.imports[root] = root

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and not node.level:
            for alias in node.names:
                self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def _path(self, node: ast.expr) -> str | None:
        """The dotted path of a name or attribute chain, resolved through imports/bindings."""
        if isinstance(node, ast.Name):
            return self.bound.get(node.id) or self.imports.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._path(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):  # boto3.client("s3").delete_bucket(...)
            made = self._path(node.func)
            return _constructed(made)
        return None

    def _bind(self, target: ast.expr, value: ast.expr | None) -> None:
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Call):
            return
        made = _constructed(self._path(value.func))
        if made is not None:
            self.bound[target.id] = made

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._bind(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._bind(node.target, node.value)
        self.generic_visit(node)

    def _with(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            if item.optional_vars is not None:
                self._bind(item.optional_vars, item.context_expr)
        self.generic_visit(node)

    visit_With = _with
    visit_AsyncWith = _with

    # -- adapters ------------------------------------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [self._path(b) or "" for b in node.bases]
        inside = any(b.startswith("effectgate") and b.endswith("Adapter") for b in bases)
        self.adapter_depth += inside
        self.generic_visit(node)
        self.adapter_depth -= inside

    # -- calls ---------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        path = self._path(node.func)
        if path is not None:
            path = _ALIASES.get(path, path)
            if path.endswith(".request"):
                method = node.args[0] if node.args else None
                for kw in node.keywords:
                    if kw.arg == "method":
                        method = kw.value
                verb = (
                    method.value.upper()
                    if isinstance(method, ast.Constant) and isinstance(method.value, str)
                    else "?"
                )
                path = f"{path}:{verb}"
            rule = _match(path, self.rules)
            if rule is not None:
                found = Finding(self.file, node.lineno, node.col_offset + 1, path, rule)
                (self.report.in_adapters if self.adapter_depth else self.report.findings).append(
                    found
                )
            else:
                gate = _match(path, self.gates)
                if gate is not None:
                    self.report.gated.append(
                        Finding(self.file, node.lineno, node.col_offset + 1, path, gate)
                    )
        self.generic_visit(node)


def _constructed(made: str | None) -> str | None:
    """The path of what calling ``made`` returns: ``requests.Session()`` is a
    ``requests.Session``, ``boto3.client("ec2")`` a ``boto3.client``."""
    return None if made is None else _ALIASES.get(made, made)
