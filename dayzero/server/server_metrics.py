"""What `dayzero serve` exposes at /metrics (Prometheus text format): requests by route and status, tokens in and
out, time to first token and request latency, and the engine's state read at scrape time (sequences running and
waiting, free cache pages and state slots, steps, preemptions, speculative drafts; an engine in another process
sends them with its updates). One registry per server.

Beside its own dayzero_* names it exposes vLLM's (vllm:*, each with a model_name label), so that dashboards and
alerts written for vLLM read a dayzero server unchanged."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from dayzero.runtime.llm_engine import LLMEngine

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# the gap between two tokens of one answer (vLLM's buckets for it)
TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                 80.0)


def engine_counts(engine: LLMEngine) -> dict[str, dict[str, int]]:
    """The engine's gauges and counters now (plain reads of the engine thread's containers)."""
    stats, prefixes = engine.stats, engine.prefix_cache
    gauges = {"running_sequences": len(engine.scheduler.running),
              "waiting_sequences": len(engine.scheduler.waiting),
              "free_cache_pages": engine.blocks.num_free, "cache_pages": engine.blocks.num_pages - 1,
              "free_state_slot_groups": engine.states.num_free,
              # pages only cached prefixes hold: given to running requests when they need them
              "reclaimable_cache_pages": engine.blocks.num_reclaimable,
              "cached_prefixes": len(prefixes.prefixes) if prefixes else 0}
    counters = {"engine_steps": stats.steps, "preemptions": stats.preemptions,
                "draft_tokens": stats.drafted_tokens, "accepted_draft_tokens": stats.accepted_tokens,
                "prefix_cache_hit_tokens": prefixes.hit_tokens if prefixes else 0}
    return {"gauges": gauges, "counters": counters}


def cache_usage(gauges: dict[str, int]) -> float:
    """The share of the cache's pages (the dummy page left out) not free, 0..1 (0 before the engine sent any)."""
    pages = gauges.get("cache_pages", 0)
    return 1 - gauges["free_cache_pages"] / pages if pages else 0.0


class EngineCollector:
    """The engine's counts, read when scraped: from the engine (in this process) or as its process last sent them."""

    def __init__(self, counts: Callable[[], dict], open_requests: Callable[[], int], model_name: str):
        self.counts, self.open_requests, self.model_name = counts, open_requests, model_name

    def collect(self):
        counts = self.counts()
        gauges = counts["gauges"]
        for name, value in {**gauges, "open_requests": self.open_requests()}.items():
            yield GaugeMetricFamily(f"dayzero_{name}", name.replace("_", " "), value=value)
        for name, value in counts["counters"].items():
            yield CounterMetricFamily(f"dayzero_{name}", name.replace("_", " "), value=value)
        vllm = {"num_requests_running": ("sequences the engine is running", gauges.get("running_sequences", 0)),
                "num_requests_waiting": ("sequences waiting for the engine", gauges.get("waiting_sequences", 0)),
                "gpu_cache_usage_perc": ("KV-cache use: 1 is every page taken", cache_usage(gauges))}
        for name, (doc, value) in vllm.items():
            family = GaugeMetricFamily(f"vllm:{name}", doc, labels=["model_name"])
            family.add_metric([self.model_name], value)
            yield family


class ServerMetrics:
    def __init__(self, counts: Callable[[], dict], open_requests: Callable[[], int], model_name: str):
        self.registry = CollectorRegistry()
        self.requests = Counter("dayzero_requests", "HTTP requests answered", ["route", "status"],
                                registry=self.registry)
        self.prompt_tokens = Counter("dayzero_prompt_tokens", "prompt tokens of finished requests",
                                     registry=self.registry)
        self.generation_tokens = Counter("dayzero_generation_tokens", "tokens generated", registry=self.registry)
        self.first_token = Histogram("dayzero_time_to_first_token_seconds", "submit to a choice's first token",
                                     buckets=LATENCY_BUCKETS, registry=self.registry)
        self.latency = Histogram("dayzero_request_seconds", "submit to the last token of a request",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(EngineCollector(counts, open_requests, model_name))
        self.model_name = model_name
        label = ["model_name"]
        self.vllm_prompt_tokens = Counter("vllm:prompt_tokens", "prompt tokens of finished requests", label,
                                          registry=self.registry).labels(model_name)
        self.vllm_generation_tokens = Counter("vllm:generation_tokens", "tokens generated", label,
                                              registry=self.registry).labels(model_name)
        self.vllm_first_token = Histogram("vllm:time_to_first_token_seconds", "submit to a choice's first token",
                                          label, buckets=LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self.vllm_inter_token = Histogram("vllm:inter_token_latency_seconds", "time between a choice's tokens",
                                          label, buckets=TOKEN_BUCKETS, registry=self.registry).labels(model_name)
        self.vllm_per_output_token = Histogram("vllm:time_per_output_token_seconds",
                                               "time between a choice's tokens", label, buckets=TOKEN_BUCKETS,
                                               registry=self.registry).labels(model_name)
        self.vllm_latency = Histogram("vllm:e2e_request_latency_seconds", "submit to the last token of a request",
                                      label, buckets=LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self.vllm_success = Counter("vllm:request_success", "choices finished, by finish reason",
                                    ["model_name", "finished_reason"], registry=self.registry)

    def tokens(self, prompt: int, generated: int) -> None:
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(generated)
        self.vllm_prompt_tokens.inc(prompt)
        self.vllm_generation_tokens.inc(generated)

    def first_token_after(self, seconds: float) -> None:
        self.first_token.observe(seconds)
        self.vllm_first_token.observe(seconds)

    def token_gap(self, seconds: float, count: int) -> None:
        """`count` tokens came `seconds` after the choice's previous ones: each took seconds / count."""
        for _ in range(count):
            self.vllm_inter_token.observe(seconds / count)
            self.vllm_per_output_token.observe(seconds / count)

    def finished(self, seconds: float, reasons: list[str]) -> None:
        """A request whose every choice finished, after `seconds`, for `reasons` (one per choice)."""
        self.latency.observe(seconds)
        self.vllm_latency.observe(seconds)
        for reason in reasons:
            self.vllm_success.labels(self.model_name, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class CountRequests:
    """ASGI middleware: counts each answered HTTP request by route (one of `routes`, else "other") and status."""

    def __init__(self, app, metrics: ServerMetrics, routes: frozenset[str]):
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in self.routes else "other"

        async def counted(message):
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(route, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)


class ThroughputLog:
    """The periodic log line: prompt and generation tokens per second over the interval, requests running and
    waiting, KV-cache use. Tokens are counted as they are taken (prompt) and as they come (generation)."""

    def __init__(self, counts: Callable[[], dict]):
        self.counts = counts
        self.prompt_tokens = self.generation_tokens = 0
        self._seen = (0, 0, time.perf_counter())

    def line(self) -> str | None:
        """What the interval since the last call did; None when nothing ran, waited or moved."""
        now = time.perf_counter()
        prompt, generated, since = self._seen
        self._seen = (self.prompt_tokens, self.generation_tokens, now)
        gauges = self.counts()["gauges"]
        running, waiting = gauges.get("running_sequences", 0), gauges.get("waiting_sequences", 0)
        moved_prompt, moved_generated = self.prompt_tokens - prompt, self.generation_tokens - generated
        if not (running or waiting or moved_prompt or moved_generated):
            return None
        seconds = max(now - since, 1e-9)
        return (f"prompt throughput: {moved_prompt / seconds:.1f} tokens/s, generation throughput: "
                f"{moved_generated / seconds:.1f} tokens/s, running: {running} reqs, waiting: {waiting} reqs, "
                f"KV cache use: {100 * cache_usage(gauges):.1f}%")
