"""Run the conformance kit against every shipped adapter and its local stand-in; write the
reports. ``python tests/kit_reports.py docs/kit-reports`` regenerates the committed ones;
``python tests/kit_reports.py docs/kit-reports gateway`` only the MCP gateway's two (its upstream
adapter against the SDK upstreams of tests/gateway_upstreams.py)."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

import venuekit
from effectgate.adapters._paper_server import serve_paper_venue
from effectgate.adapters.aws import Ec2Adapter
from effectgate.adapters.email import EmailAdapter
from effectgate.adapters.http import HttpVenueAdapter
from effectgate.adapters.stripe import StripeAdapter
from effectgate.testing import PaperAdapter, PaperVenue, run_conformance

STRIPE_KEY = "sk_test_CANARY0123456789abcdef"
AWS_SECRET = "CANARYsecretAccessKey0123456789abcdefXYZ"
HTTP_KEY = "CANARY-http-venue-key-0123456789"


def gateway_reports(out: Path) -> None:
    """The gateway's upstream adapter against an upstream that honours the key and one that
    does not (both real MCP servers written with the official SDK, over stdio)."""
    import tempfile

    from gatewaykit import run_kit
    from test_gateway import gateway_toml

    out.mkdir(parents=True, exist_ok=True)
    for mode in ("keyed", "unkeyed"):
        with tempfile.TemporaryDirectory() as tmp:
            rep = run_kit(mode, Path(tmp), gateway_toml(Path(tmp), mode))
        rep.write(out / f"gateway-{mode}-upstream.json")
        print(rep.render())


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    os.environ["EG_KIT_STRIPE_KEY"], os.environ["EG_KIT_AWS_SECRET"] = STRIPE_KEY, AWS_SECRET

    def stripe_adapter(url: str) -> StripeAdapter:
        return StripeAdapter(
            credential_env="EG_KIT_STRIPE_KEY",
            endpoint=url,
            probe_via="list",
            server_created_filter=False,
            listing_lookback=600,
            timeout=5,
        )

    def ec2(url: str) -> Ec2Adapter:
        return Ec2Adapter(
            region="us-east-1",
            access_key_id="AKIATESTONLY",
            credential_env="EG_KIT_AWS_SECRET",
            endpoint=url,
            timeout=5,
            listing_lookback=600,
        )

    def mail(port: int) -> EmailAdapter:
        return EmailAdapter(
            host="127.0.0.1", port=port, sender="effectgate@example.test", starttls=False, timeout=3
        )

    def http(url: str) -> HttpVenueAdapter:
        return HttpVenueAdapter(url, credential=HTTP_KEY, timeout=2.0)

    reports = []
    s = venuekit.start_localstripe()
    try:
        drv = venuekit.StripeDriver(s.url, STRIPE_KEY, stripe_adapter)
        lib = {"stripe": version("stripe"), "localstripe": version("localstripe")}
        reports.append(
            (
                "stripe-localstripe",
                run_conformance(stripe_adapter(s.url), drv, horizon=2.0, versions=lib),
            )
        )
    finally:
        s.stop()
    m = venuekit.start_moto()
    try:
        drv2 = venuekit.Ec2Driver(m.url, AWS_SECRET, ec2)
        lib = {"boto3": version("boto3"), "moto": version("moto")}
        reports.append(("aws-moto", run_conformance(ec2(m.url), drv2, horizon=2.0, versions=lib)))
    finally:
        m.stop()
    box = venuekit.start_smtp()
    try:
        drv3 = venuekit.EmailDriver(box, mail)
        lib = {"aiosmtpd": version("aiosmtpd")}
        reports.append(
            ("email-aiosmtpd", run_conformance(mail(box.port), drv3, horizon=1.0, versions=lib))
        )
    finally:
        venuekit.stop_smtp(box)
    paper = PaperVenue(max_quantity=1000)
    reports.append(
        ("paper", run_conformance(PaperAdapter(paper), venuekit.PaperDriver(paper), horizon=1.0))
    )
    served = PaperVenue(max_quantity=1000)
    with serve_paper_venue(served, api_key=HTTP_KEY) as running:
        drv4 = venuekit.PaperDriver(
            served, secret=HTTP_KEY, unreachable=lambda: http("http://127.0.0.1:9"), pointed_at=http
        )
        reports.append(("http-paper-server", run_conformance(http(running.url), drv4, horizon=1.0)))
    for name, rep in reports:
        rep.write(out / f"{name}.json")
        print(rep.render())


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "kit-reports")
    if sys.argv[2:] == ["gateway"]:
        gateway_reports(target)
    else:
        main(target)
        gateway_reports(target)
