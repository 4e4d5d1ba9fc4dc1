"""Sending a chunk, one use case: claim the chunk → send its recipients through FCM (a port)
in the pod's sliding window → record each answer → close the chunk (which may complete the
campaign) → tell the consumer how to settle the message.

- ``chunk.py``: the use case (``ChunkSender.process`` → a ``Verdict``), its checks before every
  request (cancel, budget, shutdown, channel), and what a refusal of the whole campaign means;
- ``window.py``: the pod's requests to FCM, shared by every chunk in hand, and their outcomes
  written in groups; the retry, re-authentication and stop rules of FCM's answers;
- ``claims.py``: holding a chunk while sending it (one sender at a time);
- ``lifecycle.py``: recording outcomes and closing a chunk, whoever does it;
- ``campaigns.py``: what a sender keeps of each campaign (its message, its cancel state);
- ``refusals.py``: FCM refusing a whole campaign (a configuration error, a wrong project);
- ``dead_chunks.py``: a chunk RabbitMQ gave up on.

``services/sender`` keeps the consumers, the settling of messages and the composition root.
One outcome type, ``herald.domain.outcomes.RecipientOutcome``, goes from the window to the store.
"""
