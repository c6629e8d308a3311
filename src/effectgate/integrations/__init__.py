"""effectgate for agent frameworks: action classes as the framework's tools, approval tiers on
the framework's own human-in-the-loop mechanism.

Each framework has its own module and optional extra (``pip install 'effectgate[langgraph]'``,
``[openai-agents]``, ``[pydantic-ai]``); this package holds what they share:

- :class:`EffectgateClient`: the harness's door to an effectgate service, over HTTP with a
  ``harness`` (or ``agent``) token. Over HTTP on purpose: that token may only propose and read,
  so the agent's process cannot approve its own actions; an approval is recorded by a person
  holding an ``approver`` or ``operator`` token (the console, the CLI or the API).
- :func:`operation_id_for`: the operation id of one tool call, a function of the tool call's id
  (minted once by the model when it decided on the call, and persisted by the framework in its
  checkpoint, run state or message history before the tool runs) and a namespace (the thread or
  run). A resumed or re-run step has the same call id, so it replays the same operation; two
  calls are two actions even with identical arguments. Never a function of the arguments.
- :class:`ToolResult`: an operation, or a refusal, as text a model can act on.
"""

from effectgate.integrations._client import EffectgateClient, ToolResult, ToolSpec, operation_id_for

__all__ = ["EffectgateClient", "ToolResult", "ToolSpec", "operation_id_for"]
