"""``[anchor]``: where the service checkpoints the audit heads, and how often (issue 20).

[anchor]
interval = 300                       # seconds; 0: only on demand (`effectgate audit anchor`)
files = ["/mnt/other-volume/effectgate-anchors.jsonl"]
urls = ["https://objects.example/bucket/effectgate"]   # PUT; bearer from token_env
command = ["/usr/local/bin/sign-and-ship"]             # the checkpoint on stdin
key_env = "EFFECTGATE_ANCHOR_KEY"    # HMAC-signs each checkpoint (the NAME of the variable)
token_env = "EFFECTGATE_ANCHOR_TOKEN"
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from effectgate._evidence.anchor import (
    AnchorProvider,
    CommandAnchor,
    FileAnchor,
    HttpAnchor,
    anchor_heads,
)
from effectgate._service._toml import Section
from effectgate.errors import ConfigError
from effectgate.store.roles import Store

__all__ = ["AnchorConfig", "AnchorJob", "anchor_section"]

log = logging.getLogger("effectgate.anchor")
_ENV = r"[A-Z_][A-Z0-9_]{0,127}"


@dataclass(frozen=True, slots=True)
class AnchorConfig:
    interval: float
    files: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    key_env: str | None = None
    token_env: str | None = None

    def providers(self) -> list[AnchorProvider]:
        token = os.environ.get(self.token_env) if self.token_env else None
        out: list[AnchorProvider] = [FileAnchor(f) for f in self.files]
        out += [HttpAnchor(u, token=token) for u in self.urls]
        if self.command:
            out.append(CommandAnchor(self.command))
        return out

    def key(self) -> bytes | None:
        return os.environ.get(self.key_env, "").encode() or None if self.key_env else None


def anchor_section(sec: Section | None) -> AnchorConfig | None:
    if sec is None:
        return None
    cfg = AnchorConfig(
        interval=sec.number("interval", 300.0, exclusive=False),
        files=tuple(sec.text_list("files") or ()),
        urls=tuple(sec.text_list("urls") or ()),
        command=tuple(sec.text_list("command") or ()),
        key_env=sec.text("key_env", pattern=_ENV),
        token_env=sec.text("token_env", pattern=_ENV),
    )
    if not (cfg.files or cfg.urls or cfg.command):
        sec.fail(None, "give at least one of files, urls or command")
    if cfg.key_env is not None and not os.environ.get(cfg.key_env):
        sec.fail("key_env", f"environment variable {cfg.key_env} is not set or empty")
    for url in cfg.urls:
        if not url.startswith(("http://", "https://")):
            sec.fail("urls", f"{url!r} is not an http(s) URL")
    sec.done()
    return cfg


class AnchorJob:
    """Checkpoints the heads every ``interval`` seconds in a daemon thread (once per process)."""

    def __init__(self, store: Store, config: AnchorConfig) -> None:
        self.store, self.config = store, config
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.last_digest: str | None = None
        #: The heads just after this job's last anchoring (its own ``audit_anchored`` entry).
        self.after: dict[int, tuple[int, str]] | None = None

    def once(self) -> str:
        """Anchor the heads, unless nothing was written since this job's own last anchoring
        entry (each anchoring appends one: re-anchoring only that would grow the log forever)."""
        if self.last_digest is not None and self.store.audit_heads() == self.after:
            return self.last_digest
        checkpoint, _ = anchor_heads(self.store, self.config.providers(), key=self.config.key())
        self.after = self.store.audit_heads()
        self.last_digest = checkpoint.digest
        return checkpoint.digest

    def start(self) -> None:
        if self.config.interval <= 0 or self.thread is not None:
            return

        def run() -> None:
            while not self.stop.wait(self.config.interval):
                try:
                    self.once()
                except (ConfigError, OSError) as exc:  # an anchor outage must not end the job
                    log.error("anchoring the audit heads failed: %s", exc)
                except Exception as exc:
                    log.error("anchoring the audit heads failed (%s)", type(exc).__name__)

        self.thread = threading.Thread(target=run, name="effectgate-anchor", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
