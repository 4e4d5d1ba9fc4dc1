"""``python -m services.scheduler``: fire scheduled campaigns when they are due."""

from herald.runtime.worker import run_worker
from services.scheduler.main import compose

DEFAULT_METRICS_PORT = 9103

if __name__ == "__main__":
    run_worker("scheduler", DEFAULT_METRICS_PORT, acknowledges_cancels=False, compose=compose)
