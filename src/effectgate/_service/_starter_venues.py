"""``effectgate init --venue stripe|aws|email``: the starter's extra adapter and class.

Appended to the paper starter, so the first hour still works with nothing running; the new
class shows the real venue's adapter block, its venue contract (measured, not assumed: see
docs/adapters.md) and a policy. The credential is named, never written.
"""

from __future__ import annotations

__all__ = ["VENUE_STARTERS"]

_STRIPE = """
# --- Stripe (pip install 'effectgate[stripe]'; docs/adapters/stripe.md) ---------------------
[adapters.stripe]
kind = "stripe"
credential_env = "STRIPE_API_KEY"   # the NAME of the variable; a restricted test-mode key first
timeout = 10

[adapters.stripe.options]
operations = { create_payment = "payment", refund_payment = "refund" }
listing_lookback = 86400            # seconds of account history each sweep lists
probe_via = "search"                # Stripe search: eventually consistent (see the horizon)

[classes.create_payment]
adapter = "stripe"
effect_class = "non_idempotent_mutation"
tier_floor = "approve"
# Stripe search usually shows an object within a minute and can lag longer in an incident.
visibility_horizon = 3600
key_retention = 86400               # Stripe prunes idempotency keys after at least 24 hours

[classes.create_payment.venue]
honours_key = "unknown"             # "true" only once the kit measured it against Stripe itself
read_view = "lagging"
# conformance_report = "kit/stripe.json"

[classes.create_payment.json_schema]
type = "object"
required = ["amount", "currency", "payment_method"]

[classes.create_payment.json_schema.properties.amount]
type = "integer"
minimum = 1
maximum = 1000000

[classes.create_payment.json_schema.properties.currency]
type = "string"
enum = ["usd", "eur"]

[classes.create_payment.json_schema.properties.payment_method]
type = "string"
pattern = "^pm_[A-Za-z0-9_]{1,60}$"

[policies.create_payment]
kind = "limit"
"""

_AWS = """
# --- AWS EC2 (pip install 'effectgate[aws]'; docs/adapters/aws.md) --------------------------
[adapters.aws]
kind = "aws"
credential_env = "AWS_SECRET_ACCESS_KEY"   # the NAME of the variable
timeout = 10

[adapters.aws.options]
region = "eu-west-1"
access_key_id = "AKIA..."           # an identifier, not a secret; replace it
operations = { run_instance = "run", terminate_instance = "terminate" }
listing_lookback = 3000             # inside the hour EC2 keeps terminated instances listed

[classes.run_instance]
adapter = "aws"
effect_class = "compensatable_mutation"
tier_floor = "approve"
visibility_horizon = 120            # DescribeInstances is eventually consistent
key_retention = 86400

[classes.run_instance.venue]
honours_key = "unknown"             # moto ignores ClientToken; measure real EC2 with the kit
read_view = "lagging"

[classes.run_instance.json_schema]
type = "object"
required = ["image_id", "instance_type"]

[classes.run_instance.json_schema.properties.image_id]
type = "string"
pattern = "^ami-[0-9a-f]{8,17}$"

[classes.run_instance.json_schema.properties.instance_type]
type = "string"
enum = ["t3.micro", "t3.small"]

[policies.run_instance]
kind = "limit"
"""

_EMAIL = """
# --- Email over SMTP (docs/adapters/email.md): a venue with NO read view --------------------
[adapters.email]
kind = "email"
credential_env = "SMTP_PASSWORD"    # the NAME of the variable
timeout = 10

[adapters.email.options]
host = "smtp.example.com"
port = 587
sender = "agent@example.com"
username = "agent@example.com"
starttls = true
actions = ["send_email"]

[classes.send_email]
adapter = "email"
effect_class = "non_idempotent_mutation"
tier_floor = "validate"
visibility_horizon = 300
key_retention = 86400
settlement_window = 900             # an uncertain email pages the operator after this

[classes.send_email.venue]
honours_key = "false"               # SMTP never deduplicates by Message-ID
read_view = "none"                  # uncertain rows go to an operator, never written off

[classes.send_email.json_schema]
type = "object"
required = ["to", "subject", "body"]

[classes.send_email.json_schema.properties.to]
type = "string"
pattern = "^[A-Za-z0-9._+-]{1,64}@[A-Za-z0-9.-]{1,190}$"

[classes.send_email.json_schema.properties.subject]
type = "string"
maxLength = 200

[classes.send_email.json_schema.properties.body]
type = "string"
maxLength = 4000

[policies.send_email]
kind = "limit"
"""

VENUE_STARTERS = {"paper": "", "stripe": _STRIPE, "aws": _AWS, "email": _EMAIL}
