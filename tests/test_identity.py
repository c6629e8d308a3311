"""Verified identity (issue 18): JWTs checked against a JWKS endpoint (served on loopback) or a
PEM key, and a revocation feed that takes effect without a restart.

The invariant checked (docs/authority.md, "identity from the credential"): the principal, its
role and its tenant reach the ledger and the audit from the verified credential, never from the
request body; a token that fails any check authenticates no one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient

from effectgate._core.principals import Capability, Principal, Role
from effectgate._doors.http.app import create_app
from effectgate._service import Service, parse_config
from effectgate._service._identity import JwtSettings, JwtVerifier, RevocationFeed
from effectgate.errors import ConfigError, ServiceUnavailable, Unauthenticated
from effectgate.store.roles import Store
from servicekit import ORDER, config_text

ISSUER = "https://idp.test/"
AUDIENCE = "effectgate"

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def mint(
    key: rsa.RSAPrivateKey = KEY,
    *,
    kid: str = "k1",
    typ: str = "at+jwt",
    alg: str = "RS256",
    **claims: Any,
) -> str:
    now = int(time.time())
    body: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "agent-jane",
        "role": "agent",
        "tenant": "alpha",
        "iat": now,
        "exp": now + 300,
        "jti": "t-1",
    }
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, key, algorithm=alg, headers={"kid": kid, "typ": typ})


class _Jwks(BaseHTTPRequestHandler):
    document: bytes = b"{}"
    revoked: bytes = b'{"principals": [], "token_ids": []}'

    def do_GET(self) -> None:
        body = self.document if self.path == "/jwks.json" else self.revoked
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def idp() -> Iterator[str]:
    """A JWKS endpoint and a revocation feed on a loopback HTTP server."""
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
    _Jwks.document = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig"}]}).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Jwks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=5)


def verifier(idp: str, revocations: RevocationFeed | None = None, **over: Any) -> JwtVerifier:
    settings = JwtSettings(issuer=ISSUER, audience=AUDIENCE, jwks_url=f"{idp}/jwks.json", **over)
    return JwtVerifier(settings, revocations)


class TestJwtVerification:
    def test_a_good_token_is_its_principal(self, idp: str) -> None:
        assert verifier(idp).verify(mint()) == Principal("agent-jane", Role.AGENT, "alpha")

    def test_the_pem_key_works_as_well(self) -> None:
        v = JwtVerifier(JwtSettings(issuer=ISSUER, audience=AUDIENCE, public_key_pem=pem(KEY)))
        assert v.verify(mint(role="operator", tenant="*")).role is Role.OPERATOR

    @pytest.mark.parametrize(
        ("token", "why"),
        [
            (lambda: mint(exp=int(time.time()) - 120), "expired"),
            (lambda: mint(aud="someone-else"), "audience"),
            (lambda: mint(iss="https://evil.test/"), "issuer"),
            (lambda: mint(OTHER_KEY), "signature"),
            (lambda: mint(kid="unknown"), "signing key"),
            (lambda: mint(typ="JWT"), "token type"),
            (lambda: mint(exp=None), "exp"),
            (lambda: mint(role="root"), "not a role"),
            (lambda: mint(tenant="*"), "tenant"),  # only an operator spans every tenant
            (lambda: mint(sub="system:gate"), "subject"),
            (lambda: "not.a.jwt", "malformed"),
        ],
    )
    def test_a_bad_token_authenticates_no_one(self, idp: str, token: Any, why: str) -> None:
        with pytest.raises(Unauthenticated, match=why):
            verifier(idp).verify(token())

    def test_clock_skew_is_bounded(self, idp: str) -> None:
        late = mint(exp=int(time.time()) - 10)
        assert verifier(idp, leeway=30).verify(late).name == "agent-jane"
        with pytest.raises(Unauthenticated, match="expired"):
            verifier(idp, leeway=0).verify(late)

    def test_symmetric_and_none_algorithms_are_refused(self, idp: str) -> None:
        unsigned = jwt.encode(
            {"iss": ISSUER, "aud": AUDIENCE, "sub": "x", "exp": int(time.time()) + 60},
            None,
            algorithm="none",
            headers={"typ": "at+jwt", "kid": "k1"},
        )
        with pytest.raises(Unauthenticated):
            verifier(idp).verify(unsigned)
        with pytest.raises(ConfigError, match="algorithms"):
            JwtSettings(issuer=ISSUER, audience=AUDIENCE, public_key_pem="x", algorithms=("HS256",))
        with pytest.raises(ConfigError, match="exactly one"):
            JwtSettings(issuer=ISSUER, audience=AUDIENCE)


class TestRevocationFeed:
    def test_a_revocation_takes_effect_at_the_next_poll(self, idp: str, tmp_path: Path) -> None:
        feed_file = tmp_path / "revoked.json"
        feed_file.write_text('{"principals": []}')
        feed = RevocationFeed(str(feed_file), interval=0.05)
        feed.start()
        try:
            v = verifier(idp, feed)
            assert v.verify(mint()).name == "agent-jane"
            feed_file.write_text('{"principals": ["agent-jane"]}')
            deadline = time.monotonic() + 5
            while not feed.revoked("agent-jane"):
                assert time.monotonic() < deadline, "the feed was not polled"
                time.sleep(0.02)
            with pytest.raises(Unauthenticated, match="revoked"):
                v.verify(mint())
        finally:
            feed.stop()

    def test_a_token_id_can_be_revoked_alone(self, idp: str) -> None:
        _Jwks.revoked = b'{"principals": [], "token_ids": ["t-1"]}'
        feed = RevocationFeed(f"{idp}/revoked.json")
        feed.refresh()
        v = verifier(idp, feed)
        with pytest.raises(Unauthenticated, match="revoked"):
            v.verify(mint(jti="t-1"))
        assert v.verify(mint(jti="t-2")).name == "agent-jane"

    def test_a_stale_feed_fails_closed(self, tmp_path: Path) -> None:
        now = [0.0]
        feed_file = tmp_path / "revoked.json"
        feed_file.write_text('{"principals": []}')
        feed = RevocationFeed(str(feed_file), interval=1, stale_after=5, clock=lambda: now[0])
        with pytest.raises(ServiceUnavailable):  # never read
            feed.revoked("x")
        feed.refresh()
        assert not feed.revoked("x")
        feed_file.write_text("garbage")
        now[0] = 4.0
        feed.refresh()  # a bad read keeps the last good list...
        assert not feed.revoked("x")
        now[0] = 6.0  # ...until it is too old to trust
        with pytest.raises(ServiceUnavailable):
            feed.revoked("x")


class TestOverHttp:
    """A JWT authenticates at the HTTP door; the journal's principal is the token's subject,
    whatever the body says."""

    def test_the_principal_comes_from_the_credential(self, tmp_path: Path, store: Store) -> None:
        (tmp_path / "idp.pem").write_text(pem(KEY))
        (tmp_path / "revoked.json").write_text('{"principals": ["agent-gone"]}')
        text = (
            config_text(store_url=f"sqlite:///{tmp_path}/ledger.db")
            + f"""
[identity]
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
public_key_file = "idp.pem"
revocations = "{tmp_path}/revoked.json"
revocation_interval = 60
"""
        )
        svc = Service(parse_config(text, "t.toml", base_dir=tmp_path), store=store)
        try:
            with TestClient(create_app(svc, mcp_http=False)) as client:
                body = {**ORDER, "proposed_by": {"model": "m", "session": "ops"}}
                r = client.post(
                    "/v1/actions/submit_order",
                    json=body,
                    headers={"Authorization": f"Bearer {mint()}", "Idempotency-Key": "op-1"},
                )
                assert r.status_code in (200, 201, 202), r.text
                entries = store.audit_entries(scope="alpha", operation_id="op-1")
                journal = [e for e in entries if "decision" in e.detail]
                assert journal and journal[0].detail["principal"] == "agent-jane"
                for bad in (mint(aud="x"), mint(sub="agent-gone")):
                    r = client.post(
                        "/v1/actions/submit_order",
                        json=ORDER,
                        headers={"Authorization": f"Bearer {bad}", "Idempotency-Key": "op-2"},
                    )
                    assert r.status_code == 401, r.text
                assert store.get("alpha", "op-2") is None
        finally:
            svc.close()

    def test_identity_config_is_checked(self, tmp_path: Path) -> None:
        base = config_text(store_url=f"sqlite:///{tmp_path}/ledger.db")
        with pytest.raises(ConfigError, match="exactly one"):
            parse_config(base + '[identity]\nissuer = "i"\naudience = "a"\n', "t.toml")
        with pytest.raises(ConfigError, match="algorithms"):
            parse_config(
                base + '[identity]\nissuer = "i"\naudience = "a"\n'
                'jwks_url = "http://127.0.0.1:1/j"\nalgorithms = ["HS256"]\n',
                "t.toml",
            )


class TestClaimedRoles:
    """Several roles, and approver roles, from the verified credential's claims
    (docs/authority.md, "identity from the credential")."""

    def test_a_list_or_a_space_separated_string(self, idp: str) -> None:
        who = verifier(idp).verify(mint(role=["approver", "harness"]))
        assert who.role is Role.APPROVER and who.roles == {Role.APPROVER, Role.HARNESS}
        assert who.may(Capability.APPROVE) and who.may(Capability.RECORD_RUNS)
        assert not who.may(Capability.OPERATE)
        who = verifier(idp).verify(mint(role="offline_access approver", tenant="alpha"))
        assert who.roles == {Role.APPROVER}  # what is not an effectgate role is ignored

    def test_the_claim_name_is_configured(self, idp: str) -> None:
        v = verifier(idp, role_claim="groups")
        assert v.verify(mint(groups="operator approver", tenant="*")).roles == {
            Role.OPERATOR,
            Role.APPROVER,
        }
        with pytest.raises(Unauthenticated, match="not a role"):
            v.verify(mint())  # "role" is no longer read

    @pytest.mark.parametrize(
        ("claims", "why"),
        [
            ({"role": ["root", "admin"]}, "not a role"),
            ({"role": [1, "agent"]}, "not a role"),
            ({"role": "operator agent", "tenant": "*"}, "tenant"),  # "*" never proposes
            ({"role": "approver", "approver_roles": ["treasury", "bad name!"]}, "malformed"),
        ],
    )
    def test_bad_role_claims_authenticate_no_one(
        self, idp: str, claims: dict[str, Any], why: str
    ) -> None:
        with pytest.raises(Unauthenticated, match=why):
            verifier(idp, approver_role_claim="approver_roles").verify(mint(**claims))

    def test_approver_roles_come_from_a_claim(self, idp: str) -> None:
        v = verifier(idp, approver_role_claim="approver_roles")
        who = v.verify(mint(role="approver", approver_roles="treasury risk"))
        assert who.approver_roles == {"treasury", "risk"}
        # Without the setting, the claim is not read: roles come from the config only.
        assert verifier(idp).verify(mint(approver_roles=["treasury"])).approver_roles == set()


class TestClaimedApproverRolesOverHttp:
    """An approval needs an approver role of the class: held by config membership or asserted
    by the verified credential; the role is kept with the approval, so the check just before
    dispatch (docs/authority.md, "Approvals") counts it too."""

    def test_a_claimed_role_entitles_and_is_kept(self, tmp_path: Path, store: Store) -> None:
        (tmp_path / "idp.pem").write_text(pem(KEY))
        (tmp_path / "revoked.json").write_text('{"principals": ["appr-gone"]}')
        text = config_text(store_url=f"sqlite:///{tmp_path}/ledger.db") + f"""
[identity]
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
public_key_file = "idp.pem"
approver_role_claim = "approver_roles"
revocations = "{tmp_path}/revoked.json"

[authority.approver_roles]
treasury = []

[authority.approvers]
submit_order = ["treasury"]
"""  # fmt: skip
        svc = Service(parse_config(text, "t.toml", base_dir=tmp_path), store=store)

        def approver(**claims: Any) -> dict[str, str]:
            token = mint(sub="appr-x", role="approver", tenant="alpha", **claims)
            return {"Authorization": f"Bearer {token}"}

        try:
            with TestClient(create_app(svc, mcp_http=False)) as client:
                r = client.post(
                    "/v1/actions/submit_order",
                    json={**ORDER, "quantity": "9.5"},  # 950: above approve_above
                    headers={"Authorization": f"Bearer {mint()}", "Idempotency-Key": "op-1"},
                )
                assert r.json()["state"] == "awaiting_approval", r.text
                answer = {"fingerprint": r.json()["fingerprint"]}
                url = "/v1/admin/approvals/alpha/op-1/approve"
                # No role claimed, a role of another class, expired, wrong key, revoked: refused.
                for headers, status in (
                    (approver(), 403),
                    (approver(approver_roles="risk"), 403),
                    (approver(approver_roles="treasury", exp=int(time.time()) - 120), 401),
                    ({"Authorization": f"Bearer {mint(OTHER_KEY, role='approver')}"}, 401),
                    ({"Authorization": "Bearer " + mint(sub="appr-gone", role="approver",
                                                       approver_roles="treasury")}, 401),
                ):  # fmt: skip
                    r = client.post(url, json=answer, headers=headers)
                    assert r.status_code == status, r.text
                assert store.list_approvals("alpha", "op-1") == []
                r = client.post(url, json=answer, headers=approver(approver_roles=["treasury"]))
                assert r.status_code == 200, r.text
                # The pre-dispatch role check counted the role kept with the approval.
                assert r.json()["operation"]["state"] == "acknowledged", r.json()
            [approval] = store.list_approvals("alpha", "op-1")
            assert approval.approver == "appr-x" and approval.roles == ("treasury",)
        finally:
            svc.close()
