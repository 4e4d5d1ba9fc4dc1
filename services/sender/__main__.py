"""``python -m services.sender``: consume chunk messages and send them to FCM."""

from herald.runtime.worker import run_worker
from services.sender.main import compose

DEFAULT_METRICS_PORT = 9102

if __name__ == "__main__":
    run_worker("sender", DEFAULT_METRICS_PORT, acknowledges_cancels=True, compose=compose)
