"""``python -m services.dispatcher``: claim campaigns and page their audiences into chunks."""

from herald.runtime.worker import run_worker
from services.dispatcher.main import compose

DEFAULT_METRICS_PORT = 9101

if __name__ == "__main__":
    run_worker("dispatcher", DEFAULT_METRICS_PORT, acknowledges_cancels=True, compose=compose)
