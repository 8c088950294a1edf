"""The HTTP server in a process of its own (`dayzero serve`), the engine in the main one: HTTP parsing, tokenizing,
detokenizing and server-sent events no longer take the engine's interpreter lock between its steps (in one
process they cost 16-28% of the wall time at 16-64 requests on the H200, bench/README.md).

One pipe joins them. The HTTP process sends each choice's request (prompt ids, sampling) and cancellations; the
engine process answers after each round of commands and step with that round's updates (tokens, finish reasons,
errors) and its state (ready, draining, failed, and the counts /metrics shows). `RemoteEngine` stands in for the
EngineLoop in the HTTP process; `EngineBridge` feeds the real one in the engine process. Either side ending ends
the other: the engine process stops when the HTTP process is gone, and the HTTP process when the pipe closes.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

from dayzero.errors import DayzeroError
from dayzero.llm.chat_template import ChatTemplate
from dayzero.runtime.engine_loop import EngineLoop, Post, Update
from dayzero.runtime.sampling import SamplingParams
from dayzero.server.listener import announce, serve_in_thread
from dayzero.server.server import OpenAIServer, ServedModel, ServerOptions

# the engine process sends its state at least this often while it steps, for /metrics
STATE_EVERY_S = 0.5
# how long the engine process waits for the HTTP process to listen (it imports torch and the server first)
HTTP_START_S = 120
NO_COUNTS = {"gauges": {}, "counters": {}}


class EngineBridge:
    """The engine process's end of the pipe: commands in (a thread reads them into the loop), updates and state out
    (`flush`, on the loop's thread after each round)."""

    def __init__(self, loop: EngineLoop, conn: Connection, counts: Callable[[], dict]):
        self.loop, self._conn, self._counts = loop, conn, counts
        self._outbox: list[tuple[str, Update]] = []
        self._lock = threading.Lock()
        self._sent_state: dict | None = None
        self._sent_at = 0.0
        self.http_gone = False  # the HTTP process ended before it was told to stop
        self.listening = threading.Event()
        self._stopping = False
        threading.Thread(target=self._read, name="dayzero-http-commands", daemon=True).start()

    def _poster(self, request_id: str) -> Post:
        def post(update: Update) -> None:
            with self._lock:
                self._outbox.append((request_id, update))
        return post

    def _read(self) -> None:
        while True:
            try:
                command = self._conn.recv()
            except (EOFError, OSError):
                if not self._stopping:
                    # nobody is left to answer: stop serving
                    self.http_gone = True
                    self.loop.stop()
                return
            if command[0] == "listening":
                self.listening.set()
            elif command[0] == "add":
                _, request_id, prompt_ids, params = command
                try:
                    self.loop.submit(prompt_ids, params, request_id, self._poster(request_id))
                except DayzeroError as err:
                    self._poster(request_id)(Update(error=str(err)))
            else:
                self.loop.cancel(command[1])

    def flush(self, force: bool = False) -> None:
        """Send the updates posted since the last call, with the engine's state (when any changed, or every
        STATE_EVERY_S). A round that leaves the engine without work (its last requests finished or were cancelled)
        changes the state, so /metrics shows the idle engine at once rather than at the next request."""
        with self._lock:
            updates, self._outbox = self._outbox, []
        state = {"ready": self.loop.ready, "draining": self.loop.draining, "failure": self.loop.failure,
                 "idle": not self.loop.engine.has_work}
        now = time.perf_counter()
        if not (updates or force or state != self._sent_state or now - self._sent_at > STATE_EVERY_S):
            return
        try:
            self._conn.send(("updates", updates, {**state, "counts": self._counts()}))
        except (BrokenPipeError, OSError):
            self.http_gone = not self._stopping
            return
        self._sent_state, self._sent_at = state, now

    def wait_listening(self, seconds: float = HTTP_START_S) -> None:
        """Wait until the HTTP process takes connections (raises when it ended or took too long)."""
        deadline = time.monotonic() + seconds
        while not self.listening.wait(0.1):
            if self.http_gone or time.monotonic() > deadline:
                raise DayzeroError(f"the HTTP process did not start listening within {seconds:g} s; see its "
                                   "output above")

    def stop_http(self) -> None:
        self._stopping = True
        try:
            self._conn.send(("stop",))
        except (BrokenPipeError, OSError):
            pass


class RemoteEngine:
    """The HTTP process's stand-in for the EngineLoop: the server submits and cancels through it, and reads the
    engine's state from what the engine process last sent."""

    def __init__(self, conn: Connection, model: ServedModel):
        self.model, self._conn = model, conn
        self._posts: dict[str, Post] = {}
        self._send_lock = threading.Lock()
        self.ready = self.draining = False
        self.failure: str | None = None
        self.counts = NO_COUNTS
        self.stopped = threading.Event()

    def engine_counts(self) -> dict:
        return self.counts

    def start(self) -> RemoteEngine:
        threading.Thread(target=self._read, name="dayzero-engine-updates", daemon=True).start()
        return self

    def submit(self, prompt_ids: list[int], params: SamplingParams, request_id: str, post: Post) -> None:
        if self.failure is not None:
            raise DayzeroError(f"the engine stopped after an error and takes no new requests: {self.failure}")
        self._posts[request_id] = post
        self._send(("add", request_id, list(prompt_ids), params))

    def cancel(self, request_id: str) -> None:
        self._send(("cancel", request_id))

    def listening(self) -> None:
        """Tell the engine process that HTTP requests are taken now."""
        self._send(("listening",))

    def close(self) -> None:
        """Nothing to do: the engine process decides when serving ends."""

    def _send(self, message: tuple) -> None:
        try:
            with self._send_lock:
                self._conn.send(message)
        except (BrokenPipeError, OSError) as err:
            raise DayzeroError("the engine process has ended; restart the server") from err

    def _read(self) -> None:
        try:
            while True:
                message = self._conn.recv()
                if message[0] == "stop":
                    return
                _, updates, state = message
                for request_id, update in updates:
                    self._deliver(request_id, update)
                self.ready, self.draining, self.failure = state["ready"], state["draining"], state["failure"]
                self.counts = state["counts"]
        except (EOFError, OSError):
            self.failure = self.failure or "the engine process ended"
            for request_id in list(self._posts):
                self._deliver(request_id, Update(error=f"the engine failed: {self.failure}"))
        finally:
            self.stopped.set()

    def _deliver(self, request_id: str, update: Update) -> None:
        post = self._posts.get(request_id)
        if post is None:
            return
        if update.is_last:
            del self._posts[request_id]
        post(update)


def http_process_main(conn: Connection, model: ServedModel, options: ServerOptions, template: ChatTemplate,
                      sock: socket.socket) -> None:
    """The HTTP process: the OpenAI server over `sock` until the engine process says stop (or is gone)."""
    # Ctrl-C reaches every process of the terminal's group: the engine process drains, then tells this one to stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    remote = RemoteEngine(conn, model)
    server = OpenAIServer(None, options, template, remote=remote)
    base, stop_http = serve_in_thread(server.app, log_level="info", sock=sock,
                                      read_seconds=options.request_read_seconds)
    announce(server.model_name, base)
    remote.start()
    remote.listening()
    remote.stopped.wait()
    stop_http()
