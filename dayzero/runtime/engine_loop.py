"""The engine on a thread of its own, for a server: requests come in from an asyncio event loop, tokens go back.

`LLMEngine` is synchronous and not thread-safe, so one thread owns it: it takes commands (add, cancel, stop) from a
queue, runs a step whenever it has work and posts each request's new tokens back through the request's `post`
callable (`Updates.poster`: onto the event loop). With no work it sleeps on the queue. If a step raises, the engine's
state can no longer be trusted: every open request gets the error, and the loop refuses new ones (the server then
reports itself unhealthy).
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from dayzero.errors import DayzeroError
from dayzero.runtime.llm_engine import LLMEngine
from dayzero.runtime.logprobs import TokenLogprob
from dayzero.runtime.sampling import SamplingParams
from dayzero.runtime.sequence import Sequence

Post = Callable[["Update"], None]


@dataclass
class Update:
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # set on a request's last update
    error: str | None = None  # nothing follows: the request was refused (refused=True) or the engine failed
    refused: bool = False
    logprobs: list[TokenLogprob] | None = None  # one per token, when the request asked for them
    # the prompt's (first None), once, with the first tokens, when the request asked for them
    prompt_logprobs: list[TokenLogprob | None] | None = None

    @property
    def is_last(self) -> bool:
        return self.finish_reason is not None or self.error is not None


class Updates:
    """One HTTP request's updates, for all its choices, read in arrival order on the event loop."""

    def __init__(self):
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[tuple[int, Update]] = asyncio.Queue()

    def poster(self, index: int) -> Post:
        """A callable the engine thread posts choice `index`'s updates with."""
        def post(update: Update) -> None:
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, (index, update))
            except RuntimeError:
                # the event loop is closed: nobody is left to read
                pass
        return post

    async def next(self) -> tuple[int, Update]:
        return await self._queue.get()


@dataclass
class _Live:
    seq: Sequence
    post: Post
    sent: int = 0
    sent_prompt: bool = False  # the prompt's log probabilities went out


class EngineLoop:
    """Runs on the thread that calls `run` (`dayzero serve`: the main thread, the HTTP server on another) or on a
    thread of its own after `start` (tests, embedding). On CPUs the main thread is the faster home: torch's OpenMP
    ops issued from another thread ran 2.5x slower on the 2-core test machine (tiny-hybrid, 2 intra-op threads)."""

    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._live: dict[str, _Live] = {}
        self.failure: str | None = None
        self._thread: threading.Thread | None = None
        # set by drain(): accepted requests finish (until this perf_counter time), new ones are turned away
        self.drain_deadline: float | None = None
        # False until run() takes requests (after warm_up, if any)
        self.ready = False

    def start(self) -> EngineLoop:
        # ready before the thread runs: a caller may ask at once
        self.ready = True
        self._thread = threading.Thread(target=self.run, name="dayzero-engine", daemon=True)
        self._thread.start()
        return self

    def submit(self, prompt_ids: list[int], params: SamplingParams, request_id: str, post: Post) -> None:
        """Queue a request. The engine thread calls `post` with an empty update once it accepted the request (or
        one with the error that refused it), then with its tokens as they come."""
        if self.failure is not None:
            raise DayzeroError(f"the engine stopped after an error and takes no new requests: {self.failure}")
        self._commands.put(("add", request_id, list(prompt_ids), params, post))

    def cancel(self, request_id: str) -> None:
        """Drop a request that has not finished (its client went away): its pages and state slot are freed."""
        self._commands.put(("cancel", request_id))

    def stop(self) -> None:
        """Make `run` return after the step in progress (open requests get an error)."""
        self._commands.put(("stop",))

    def drain(self, seconds: float) -> None:
        """Make `run` return once the accepted requests have finished, or after `seconds` (then the rest get an
        error); requests submitted meanwhile are turned away."""
        self._commands.put(("drain", time.perf_counter() + seconds))

    @property
    def draining(self) -> bool:
        return self.drain_deadline is not None

    def close(self, timeout: float = 30.0) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout)

    def warm_up(self, prompt_tokens: int = 16, output_tokens: int = 4) -> None:
        """Run one short request to its end before taking requests: the first call of each kernel compiles it (on a
        GPU, Triton's JIT: seconds to minutes without a warm cache) and the first decode step captures its graph, so
        the first client does not wait for them. The vocabulary's tables for held answers are built here too (half a
        second at a 160K vocabulary), where the first such request would stall every other one. A failure here is an
        engine failure."""
        params = SamplingParams(max_tokens=output_tokens, ignore_eos=True)
        try:
            self.engine.add_request(list(range(1, prompt_tokens + 1)), params, "warm-up")
            while self.engine.has_work:
                self.engine.step()
            self.engine.prepare_json_answers()
        # any failure: as a failed step during serving
        except Exception as err:
            traceback.print_exc(file=sys.stderr)
            self.failure = f"{type(err).__name__}: {err}"

    def run(self, stop_on_failure: bool = False, after_each: Callable[[], None] = lambda: None) -> None:
        """Take commands and step the engine until `stop` (or, with stop_on_failure, until a step fails: a server
        process then exits for its supervisor to restart it, rather than stay up unable to serve). after_each: called
        once it takes requests, after each round of commands and step, and at the end (an engine process sends the
        round's updates, http_process.py)."""
        self.ready = True
        after_each()
        while True:
            idle = not self.engine.has_work or self.failure is not None
            if self.draining and (idle or time.perf_counter() > self.drain_deadline):
                break
            if not self._take_commands(wait=idle and not self.draining):
                break
            if self.engine.has_work and self.failure is None:
                self._step()
            after_each()
            if stop_on_failure and self.failure is not None:
                break
        for live in self._live.values():
            live.post(Update(error="the server is shutting down"))
        after_each()

    def _take_commands(self, wait: bool) -> bool:
        """Apply queued commands (wait for one when idle) -> False once told to stop."""
        try:
            command = self._commands.get() if wait else self._commands.get_nowait()
            while True:
                if command[0] == "stop":
                    return False
                self._apply(command)
                command = self._commands.get_nowait()
        except queue.Empty:
            return True

    def _apply(self, command: tuple) -> None:
        handlers = {"add": self._add, "cancel": self._cancel, "drain": self._drain}
        handlers[command[0]](*command[1:])

    def _drain(self, deadline: float) -> None:
        self.drain_deadline = deadline

    def _cancel(self, request_id: str) -> None:
        live = self._live.pop(request_id, None)
        if live is not None:
            self.engine.cancel(live.seq.request_id)

    def _add(self, request_id: str, prompt_ids: list[int], params: SamplingParams, post: Post) -> None:
        if self.failure is not None:
            post(Update(error=f"the engine failed: {self.failure}"))
            return
        if self.draining:
            post(Update(error="the server is shutting down and takes no new requests"))
            return
        try:
            seq = self.engine.add_request(prompt_ids, params, request_id)
        except DayzeroError as err:
            # the scheduler's message names the request; the client knows which one it sent
            post(Update(error=str(err).removeprefix(f"{request_id}: "), refused=True))
            return
        self._live[request_id] = _Live(seq, post)
        post(Update())

    def _step(self) -> None:
        try:
            self.engine.step()
        # any failure ends every open request; the traceback goes to the server's stderr
        except Exception as err:
            traceback.print_exc(file=sys.stderr)
            self.failure = f"{type(err).__name__}: {err}"
            for live in self._live.values():
                live.post(Update(error=f"the engine failed: {self.failure}"))
            self._live.clear()
            return
        self._publish()

    def _publish(self) -> None:
        for request_id, live in list(self._live.items()):
            new = live.seq.output_ids[live.sent:]
            reason = live.seq.finish_reason if live.seq.is_done else None
            if new or reason:
                logprobs = None if live.seq.logprobs is None else live.seq.logprobs[live.sent:]
                # the prompt is whole in the cache once a token follows it
                prompt_logprobs = None if live.sent_prompt or not new else live.seq.prompt_logprobs
                live.sent_prompt = live.sent_prompt or prompt_logprobs is not None
                live.sent += len(new)
                live.post(Update(list(new), reason, logprobs=logprobs, prompt_logprobs=prompt_logprobs))
            if live.seq.is_done:
                del self._live[request_id]
