"""Fixture for `effectgate scan`: consequential calls made directly (each is a finding)."""

import smtplib

import boto3
import requests
import stripe
from httpx import AsyncClient


def charge(customer: str) -> None:
    stripe.PaymentIntent.create(amount=100, currency="eur", customer=customer)  # finding


def refund(session: requests.Session) -> None:
    requests.post("https://api.example.com/refunds", json={})  # finding
    requests.get("https://api.example.com/refunds")  # a read: not reported


def infra() -> None:
    ec2 = boto3.client("ec2")
    ec2.terminate_instances(InstanceIds=["i-1"])  # finding
    ec2.describe_instances()  # a read: not reported
    boto3.client("s3").delete_bucket(Bucket="b")  # finding


def notify() -> None:
    with smtplib.SMTP("localhost") as smtp:
        smtp.sendmail("a@example.com", ["b@example.com"], "hi")  # finding


async def webhook(method: str) -> None:
    async with AsyncClient() as client:
        await client.put("https://hooks.example.com", json={})  # finding
        await client.request(method, "https://hooks.example.com")  # finding: unknown method
        await client.request("GET", "https://hooks.example.com")  # a read: not reported
