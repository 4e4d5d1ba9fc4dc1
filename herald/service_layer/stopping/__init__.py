"""Stopping and finishing a campaign: one owner (docs/cancel-protocol.md).

- ``decide.py``, the decider: cancel, pause, resume, and the stop for an FCM configuration
  error are decisions, each with an id and a kind, written once by a guarded transition
  conditional on the decision it replaces, then told to every pod (a Redis flag for a cancel,
  and a broadcast on ``herald.cancel`` naming the decision).
- ``verdict.py``, the question: every sender, dispatcher and dead-chunk handler asks
  ``PodView.verdict(campaign) → send | hold | stop``, answered from what the pod knows and,
  when that is old, from the store. A broadcast is a decision told early, never a decision.
- ``acknowledge.py``, the acknowledge path: a pod that may be sending a campaign acknowledges
  each stopping decision once, when it is idle, then reports to the settler.
- ``settle.py``, the settler: ``settle(campaign)`` owns every end and every final count
  (completed, failed, cancelled, a pause settled, a late recount); everything else only reports
  to it. Its ``recover(now)`` is the sweep's part of this protocol.
"""

from herald.service_layer.errors import CampaignNotFound
from herald.service_layer.stopping.acknowledge import Acknowledger
from herald.service_layer.stopping.decide import (
    FCM_REFUSED,
    CannotCancel,
    CannotPause,
    CannotResume,
    Decided,
    Decider,
)
from herald.service_layer.stopping.pods import FLAG_REFRESH_S, still_stopping, stopping_pods
from herald.service_layer.stopping.settle import Settler
from herald.service_layer.stopping.verdict import PodView

__all__ = ["FCM_REFUSED", "FLAG_REFRESH_S", "Acknowledger", "CampaignNotFound", "CannotCancel",
           "CannotPause", "CannotResume", "Decided", "Decider", "PodView", "Settler",
           "still_stopping", "stopping_pods"]
