"""OpenAI-compatible HTTP API over the engine (`dayzero serve`): /v1/completions and /v1/chat/completions, whole or
streamed as server-sent events, /v1/models, /health, /metrics (Prometheus, server_metrics.py), and vLLM's
/tokenize, /detokenize and /version.

The engine runs on a thread of its own or on the main thread (`EngineLoop`); each HTTP request submits one engine
request per choice (prompts x n) and reads their tokens back on the event loop. A request is answered with an error
before any output when it cannot run (400: a prompt too long for the engine, a bad field, a body that is not sound
JSON (request_body.py); 404: another model; 413: a body over the limit; 503: too many requests open, or the engine
failed), in OpenAI's JSON form; so is an exception no route expected (500, unexpected_errors.py). A client that goes
away has its requests cancelled, which frees their cache pages and state slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from dayzero.errors import DayzeroError
from dayzero.llm.api import LLM
from dayzero.llm.chat_template import ChatTemplate, load_chat_template
from dayzero.runtime.detokenizer import ChoiceText
from dayzero.runtime.engine_loop import EngineLoop, Update, Updates
from dayzero.runtime.logprobs import TokenLogprob
from dayzero.server.api_key import RequireApiKey
from dayzero.server.chat_turn import prepare_chat
from dayzero.server.openai_messages import ToolRequest
from dayzero.server.openai_protocol import GenerateRequest, parse_completion
from dayzero.server.openai_responses import FORMATS, Choice, chunk, response
from dayzero.server.reasoning import THINK_END, THINK_MARKERS, ReasoningText
from dayzero.server.request_body import parse_body
from dayzero.server.request_error import RequestError
from dayzero.server.request_run import RequestRun
from dayzero.server.server_metrics import CountRequests, ServerMetrics, ThroughputLog, engine_counts
from dayzero.server.slow_clients import READ_SECONDS
from dayzero.server.tokenize_routes import parse_detokenize, parse_tokenize
from dayzero.server.tool_call_stream import StreamedCalls
from dayzero.server.unexpected_errors import AnswerUnexpectedErrors, internal_error
from dayzero.structured.tool_calls import CALL_END, SECTION_BEGIN, SECTION_END, ToolCallText, decode_keeping, marker_ids
from dayzero.version import __version__

log = logging.getLogger("dayzero.server")


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    model_name: str | None = None  # default: the checkpoint folder's name
    max_open: int = 256  # choices (engine requests) open at once; a request past it gets 503
    max_body_bytes: int = 4 << 20
    api_key: str | None = None  # when set, /v1/ routes need "Authorization: Bearer <api_key>"
    drain_seconds: float = 30.0  # on Ctrl-C / SIGTERM: how long accepted requests may still run
    warm_up: bool = True  # run_server: one short request through the engine before serving (/health: 503 till then)
    # seconds a client has to send a whole request (headers and body); a slower one is dropped (slow_clients.py)
    request_read_seconds: float = READ_SECONDS
    # seconds between the log lines of throughput, requests and cache use while requests run or wait (0: none)
    stats_log_seconds: float = 10.0

    def __post_init__(self):
        if not 0 <= self.port < 65536:
            raise DayzeroError(f"--port must be in [0, 65535], got {self.port}")
        if self.max_open < 1 or self.max_body_bytes < 1:
            raise DayzeroError("--max-open and --max-body-bytes must be >= 1")
        if self.api_key is not None and not self.api_key.strip():
            raise DayzeroError("--api-key must not be empty")
        if self.drain_seconds < 0:
            raise DayzeroError(f"--drain-seconds must be >= 0, got {self.drain_seconds}")
        if self.stats_log_seconds < 0:
            raise DayzeroError(f"--stats-log-seconds must be >= 0, got {self.stats_log_seconds}")
        if not self.request_read_seconds > 0:
            raise DayzeroError(f"--request-read-seconds must be > 0, got {self.request_read_seconds}")


class ClientGone(Exception):
    """The HTTP client disconnected before its answer was complete."""


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _sse(body: dict) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


@dataclass(frozen=True)
class ServedModel:
    """What the HTTP side needs of the model: its folder (name, chat template), tokenizer and limits."""

    checkpoint: Path
    tokenizer: object
    max_len: int
    vocab_size: int
    # the checkpoint's sampling defaults (generation_config.json, as LLM reads it): a request's unset fields take them
    sampling_defaults: dict = field(default_factory=dict)

    @classmethod
    def of(cls, llm: LLM) -> ServedModel:
        manifest = llm.engine.manifest
        return cls(llm.checkpoint, llm.tokenizer, manifest.max_len, manifest.vocab_size, dict(llm.default_sampling))


class OpenAIServer:
    def __init__(self, llm: LLM | None, options: ServerOptions = ServerOptions(),
                 chat_template: ChatTemplate | None = None, engine_thread: bool = True, remote=None):
        """The engine in this process (`llm`; engine_thread=False: the caller runs self.loop.run() itself, as
        run_server does on the main thread), or in another one (`remote`: http_process.RemoteEngine, llm None)."""
        self.llm, self.options = llm, options
        if remote is None:
            self.model = ServedModel.of(llm)
            self.loop = EngineLoop(llm.engine).start() if engine_thread else EngineLoop(llm.engine)
            counts = partial(engine_counts, llm.engine)
        else:
            self.model, self.loop, counts = remote.model, remote, remote.engine_counts
        self.tokenizer = self.model.tokenizer
        self.model_name = options.model_name or self.model.checkpoint.name
        self.template = chat_template or load_chat_template(self.model.checkpoint)
        self.tool_markers = marker_ids(self.tokenizer)
        # a thinking model: its tokenizer has the reasoning markers as tokens, or its template writes them as text
        self.think_markers = marker_ids(self.tokenizer, THINK_MARKERS) or {}
        self.thinks = bool(self.think_markers) or THINK_END in (self.template.source or "")
        self.max_len = self.model.max_len
        self.num_open = 0
        self.metrics = ServerMetrics(counts, lambda: self.num_open, self.model_name)
        self.throughput = ThroughputLog(counts)
        routes = [Route("/health", self.health), Route("/v1/models", self.models), Route("/metrics", self.scrape),
                  Route("/v1/completions", self.completions, methods=["POST"]),
                  Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                  Route("/tokenize", self.tokenize, methods=["POST"]),
                  Route("/detokenize", self.detokenize, methods=["POST"]), Route("/version", self.version)]
        handlers = {RequestError: self._error, DayzeroError: self._user_error, HTTPException: self._http_error}
        middleware = [Middleware(CountRequests, metrics=self.metrics, routes=frozenset(r.path for r in routes)),
                      Middleware(AnswerUnexpectedErrors)]
        if options.api_key is not None:
            middleware.append(Middleware(RequireApiKey, api_key=options.api_key))
        self.app = Starlette(routes=routes, exception_handlers=handlers, middleware=middleware,
                             lifespan=self._lifespan)

    def close(self) -> None:
        self.loop.close()

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette):
        logging_task = asyncio.ensure_future(self._log_throughput()) if self.options.stats_log_seconds else None
        try:
            yield
        finally:
            if logging_task is not None:
                logging_task.cancel()
            self.close()

    async def _log_throughput(self) -> None:
        while True:
            await asyncio.sleep(self.options.stats_log_seconds)
            line = self.throughput.line()
            if line is not None:
                log.info(line)

    async def health(self, request: Request) -> Response:
        if self.loop.failure is not None:
            return JSONResponse({"status": "failed", "error": self.loop.failure}, status_code=503)
        if self.loop.draining:
            # a load balancer stops sending requests here while the accepted ones finish
            return JSONResponse({"status": "draining"}, status_code=503)
        if not self.loop.ready:
            return JSONResponse({"status": "warming up"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def scrape(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def models(self, request: Request) -> Response:
        card = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "dayzero",
                "max_model_len": self.max_len}
        return JSONResponse({"object": "list", "data": [card]})

    async def version(self, request: Request) -> Response:
        # the package (loaded before any of its modules) holds the version; it sits above this floor, so it is read
        return JSONResponse({"version": __version__})

    async def tokenize(self, request: Request) -> Response:
        asked = parse_tokenize(await self._body(request), self.template)
        tokens = self.tokenizer.encode(asked.text, add_special_tokens=asked.add_special_tokens)
        return JSONResponse({"tokens": tokens, "count": len(tokens), "max_model_len": self.max_len})

    async def detokenize(self, request: Request) -> Response:
        tokens = parse_detokenize(await self._body(request), self.model.vocab_size)
        return JSONResponse({"prompt": self.tokenizer.decode(tokens)})

    async def completions(self, request: Request) -> Response:
        body = await self._body(request)
        return await self._generate(request, "completion", parse_completion(body, self.model.sampling_defaults))

    async def chat_completions(self, request: Request) -> Response:
        body = await self._body(request)
        turn = prepare_chat(body, self.template, self.tool_markers, self.thinks, self.think_markers,
                            self.model.sampling_defaults)
        # a checkpoint's template writes the BOS and turn markers itself; the plain transcript has none
        return await self._generate(request, "chat", turn.parsed, add_special_tokens=self.template.source is None,
                                    tools=turn.tools, forced=turn.forced, thinking=turn.thinking)

    async def _error(self, request: Request, err: RequestError) -> Response:
        return JSONResponse(err.body(), status_code=err.status)

    async def _user_error(self, request: Request, err: DayzeroError) -> Response:
        return await self._error(request, RequestError(str(err)))

    async def _http_error(self, request: Request, err: HTTPException) -> Response:
        return JSONResponse(RequestError(err.detail, err.status_code).body(), status_code=err.status_code)

    async def _body(self, request: Request) -> dict:
        """The JSON object of the request body (request_body.py), refused past max_body_bytes, and of another model
        than ours."""
        limit = self.options.max_body_bytes
        declared = request.headers.get("content-length", "0")
        if not declared.isdigit() or int(declared) > limit:
            raise RequestError(f"the request body is over {limit} bytes (--max-body-bytes)", 413)
        raw = bytearray()
        try:
            async for piece in request.stream():
                raw += piece
                if len(raw) > limit:
                    raise RequestError(f"the request body is over {limit} bytes (--max-body-bytes)", 413)
        except ClientDisconnect:
            # nobody reads this answer; the status is for /metrics
            raise RequestError("the client went away before its request body arrived", 499) from None
        body = parse_body(bytes(raw))
        if body.get("model") not in (None, self.model_name):
            raise RequestError(f"the model {body['model']!r} is not served here; this server serves "
                               f"{self.model_name!r}", 404, "model", "model_not_found")
        return body

    def _encode(self, prompt: str | tuple[int, ...], add_special_tokens: bool) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
        vocab = self.model.vocab_size
        if max(prompt) >= vocab:
            raise RequestError(f"token id {max(prompt)} is outside the vocabulary of {vocab}", param="prompt")
        return list(prompt)

    async def _generate(self, request: Request, kind: str, parsed: GenerateRequest, add_special_tokens: bool = True,
                        tools: ToolRequest | None = None, forced: str = "", thinking: bool | None = None) -> Response:
        """tools: read the answers' tool calls; forced: the text the prompt ends in that begins each answer;
        thinking: split each answer's reasoning off (True: it starts inside it)."""
        self._check_vocabulary("logit_bias", [token for token, _ in parsed.sampling.logit_bias])
        self._check_vocabulary("stop_token_ids", parsed.sampling.stop_token_ids)
        prompt_ids = [self._encode(p, add_special_tokens) for p in parsed.prompts]
        run = await self._start(kind, parsed, prompt_ids, tools, forced, thinking)
        if parsed.stream:
            headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
            return StreamingResponse(self._events(request, run), media_type="text/event-stream", headers=headers)
        try:
            await self._collect(request, run)
        except ClientGone:
            return Response(status_code=499)
        fmt = FORMATS[kind]
        choices = [Choice(i, self._echo(run, i) + run.shown.get(i, ""), run.reasons[i],
                          self._logprobs(run, i, run.prompt_logprobs.get(i, []) + run.logprobs.get(i, []), 0),
                          tuple(call.body() for call in run.calls.get(i, ())), run.reasoning.get(i, ""))
                   for i in range(run.num_choices)]
        return JSONResponse(response(fmt, run.request_id, run.created, self.model_name, choices, run.usage()))

    def _check_vocabulary(self, field: str, tokens) -> None:
        vocab = self.model.vocab_size
        if any(token >= vocab for token in tokens):
            raise RequestError(f"'{field}' names a token outside the vocabulary of {vocab}", param=field)

    def _echo(self, run: RequestRun, index: int) -> str:
        """The text before choice `index`'s answer: its prompt's with `echo`, else nothing."""
        if not run.parsed.echo:
            return ""
        prompt = run.parsed.prompts[index // run.parsed.n]
        return prompt if isinstance(prompt, str) else self.tokenizer.decode(list(prompt))

    def _logprobs(self, run: RequestRun, index: int, entries: list[TokenLogprob] | None, offset: int) -> dict | None:
        """entries: the prompt's (echo) then the answer's tokens."""
        if run.parsed.sampling.logprobs is None or entries is None:
            return None
        return FORMATS[run.kind].logprobs(entries, self._token_text, offset)

    def _token_text(self, token: int) -> str:
        return self.tokenizer.decode([token])

    async def _start(self, kind: str, parsed: GenerateRequest, prompt_ids: list[list[int]],
                     tools: ToolRequest | None, forced: str, thinking: bool | None) -> RequestRun:
        """Submit every choice and wait until the engine took them all (or refused one: then none runs)."""
        count = len(prompt_ids) * parsed.n
        if self.loop.failure is not None:
            raise RequestError(f"the engine failed and takes no new requests ({self.loop.failure}); restart the "
                               "server", 503)
        if count > self.options.max_open:
            raise RequestError(f"the request asks for {count} choices (prompts x n); this server takes at most "
                               f"{self.options.max_open} at once (--max-open)", param="n")
        if self.loop.draining:
            raise RequestError("the server is shutting down and takes no new requests; send it elsewhere", 503)
        if self.num_open + count > self.options.max_open:
            raise RequestError(f"the server has {self.num_open} requests open, the most it takes is "
                               f"{self.options.max_open} (--max-open); retry later", 503)
        request_id = f"{FORMATS[kind].id_prefix}-{uuid.uuid4().hex}"
        kept = {**(self.tool_markers if tools is not None else {}),
                **(self.think_markers if thinking is not None else {})}
        decode = decode_keeping(self.tokenizer.decode, kept) if kept else self.tokenizer.decode
        texts = [ChoiceText(decode, parsed.sampling.stop) for _ in range(count)]
        run = RequestRun(request_id, kind, parsed, prompt_ids, Updates(), texts)
        if thinking is not None:
            ends = (SECTION_BEGIN,) if tools is not None else ()
            run.reasoning_texts = [ReasoningText(thinking, ends) for _ in range(count)]
        if tools is not None:
            # a named call's arguments end where their JSON object closes: the call's end markers follow
            closing = CALL_END + SECTION_END if tools.named_function is not None else ""
            run.tool_texts = [ToolCallText(forced, closing) for _ in range(count)]
            run.parallel_calls = tools.parallel
            if parsed.stream:
                run.streamed_calls = [StreamedCalls(keep_one=not tools.parallel) for _ in range(count)]
        self.num_open += count
        try:
            for index in range(count):
                prompt, choice = divmod(index, parsed.n)
                params = parsed.sampling.params(len(prompt_ids[prompt]), self.max_len, choice)
                self.loop.submit(prompt_ids[prompt], params, run.engine_id(index), run.updates.poster(index))
                self.throughput.prompt_tokens += len(prompt_ids[prompt])
                run.accepted -= 1
            await self._accepted(run)
        except BaseException:
            self._end(run)
            raise
        return run

    async def _accepted(self, run: RequestRun) -> None:
        # run.accepted counts down from -submitted: one empty update per choice says the engine took it
        while run.accepted < 0:
            index, update = await run.updates.next()
            if update.error is not None:
                run.apply(index, update)
            if update.token_ids or update.finish_reason:
                run.early.append((index, update))
            else:
                run.accepted += 1

    async def _next(self, request: Request, run: RequestRun, gone: asyncio.Task) -> tuple[int, Update]:
        if run.early:
            return self._seen(run, *run.early.pop(0))
        update = asyncio.ensure_future(run.updates.next())
        done, _ = await asyncio.wait({update, gone}, return_when=asyncio.FIRST_COMPLETED)
        if update not in done:
            update.cancel()
            raise ClientGone
        return self._seen(run, *update.result())

    def _seen(self, run: RequestRun, index: int, update: Update) -> tuple[int, Update]:
        if update.token_ids:
            now = time.perf_counter()
            if index not in run.answered:
                run.answered.add(index)
                self.metrics.first_token_after(now - run.started)
            else:
                self.metrics.token_gap(now - run.last_token_at[index], len(update.token_ids))
            run.last_token_at[index] = now
            self.throughput.generation_tokens += len(update.token_ids)
        return index, update

    async def _collect(self, request: Request, run: RequestRun) -> None:
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            while run.is_open:
                run.apply(*await self._next(request, run, gone))
        finally:
            gone.cancel()
            self._end(run)

    async def _events(self, request: Request, run: RequestRun):
        fmt = FORMATS[run.kind]
        gone = asyncio.ensure_future(_disconnected(request))
        say = partial(self._chunk_event, run)
        try:
            opening = (fmt.delta(Choice(i, self._echo(run, i), None), first=True) for i in range(run.num_choices))
            firsts = [d for d in opening if d]
            if firsts:
                yield say(firsts)
            offsets = [0] * run.num_choices
            while run.is_open:
                index, update = await self._next(request, run, gone)
                try:
                    piece = run.apply(index, update)
                except RequestError as err:
                    yield _sse(err.body())
                    return
                logprobs = self._logprobs(run, index, update.logprobs or None, offsets[index])
                # the text offsets of the completions form go on from these tokens' text (decoded once, above)
                offsets[index] += sum(len(token) for token in (logprobs or {}).get("tokens", ()))
                delta = fmt.delta(Choice(index, piece.text, run.reasons.get(index), logprobs, piece.call_deltas,
                                         piece.reasoning), first=False)
                if delta:
                    yield say([delta])
            if run.parsed.include_usage:
                yield say([], usage_body=run.usage())
            yield "data: [DONE]\n\n"
        except ClientGone:
            return
        # the status went out with the first event: the stream ends with an error event instead
        except Exception as err:
            log.exception("unexpected error in a streamed answer")
            yield _sse(internal_error(err).body())
        finally:
            gone.cancel()
            self._end(run)

    def _chunk_event(self, run: RequestRun, pieces: list[dict], usage_body: dict | None = None) -> str:
        fmt = FORMATS[run.kind]
        return _sse(chunk(fmt, run.request_id, run.created, self.model_name, pieces, usage_body))

    def _end(self, run: RequestRun) -> None:
        """Cancel the run's unfinished engine requests and give back its share of max_open (once)."""
        if run.ended:
            return
        for index in range(run.num_choices):
            if index not in run.reasons:
                self.loop.cancel(run.engine_id(index))
        self.num_open -= run.num_choices
        run.ended = True
        usage_body = run.usage()
        self.metrics.tokens(usage_body["prompt_tokens"], usage_body["completion_tokens"])
        if not run.is_open:
            self.metrics.finished(time.perf_counter() - run.started, [run.reasons[i] for i in range(run.num_choices)])
