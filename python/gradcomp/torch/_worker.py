"""One FIFO worker thread per hook state: DDP hands buckets over in the same order on every rank, and
the worker issues their collectives in that order, so the ranks' collectives always match. The hook
returns a torch Future at once (backward goes on computing the next bucket); the worker completes it
with the reduced bucket or with the exception that every rank raises."""

from __future__ import annotations

import queue
import threading
from typing import Callable

import torch


class FifoWorker:
    def __init__(self, name: str):
        self._jobs: "queue.Queue[tuple[Callable[[], torch.Tensor], torch.futures.Future] | None]" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], torch.Tensor]) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        self._jobs.put((job, fut))
        return fut

    def drain(self) -> None:
        """Returns when every submitted job has finished."""
        self._jobs.join()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                self._jobs.task_done()
                return
            job, fut = item
            try:
                fut.set_result(job())
            except BaseException as e:  # noqa: BLE001 -- handed to the waiting rank, not swallowed
                fut.set_exception(e)
            finally:
                self._jobs.task_done()
