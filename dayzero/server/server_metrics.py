"""What `dayzero serve` exposes at /metrics (Prometheus text format): requests by route and status, tokens in and
out, time to first token and request latency, and the engine's state read at scrape time (sequences running and
waiting, free cache pages and state slots, steps, preemptions, speculative drafts; an engine in another process
sends them with its updates). One registry per server."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from dayzero.runtime.llm_engine import LLMEngine

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def engine_counts(engine: LLMEngine) -> dict[str, dict[str, int]]:
    """The engine's gauges and counters now (plain reads of the engine thread's containers)."""
    stats, prefixes = engine.stats, engine.prefix_cache
    gauges = {"running_sequences": len(engine.scheduler.running),
              "waiting_sequences": len(engine.scheduler.waiting),
              "free_cache_pages": engine.blocks.num_free, "free_state_slot_groups": engine.states.num_free,
              # pages only cached prefixes hold: given to running requests when they need them
              "reclaimable_cache_pages": engine.blocks.num_reclaimable,
              "cached_prefixes": len(prefixes.prefixes) if prefixes else 0}
    counters = {"engine_steps": stats.steps, "preemptions": stats.preemptions,
                "draft_tokens": stats.drafted_tokens, "accepted_draft_tokens": stats.accepted_tokens,
                "prefix_cache_hit_tokens": prefixes.hit_tokens if prefixes else 0}
    return {"gauges": gauges, "counters": counters}


class EngineCollector:
    """The engine's counts, read when scraped: from the engine (in this process) or as its process last sent them."""

    def __init__(self, counts: Callable[[], dict], open_requests: Callable[[], int]):
        self.counts, self.open_requests = counts, open_requests

    def collect(self):
        counts = self.counts()
        for name, value in {**counts["gauges"], "open_requests": self.open_requests()}.items():
            yield GaugeMetricFamily(f"dayzero_{name}", name.replace("_", " "), value=value)
        for name, value in counts["counters"].items():
            yield CounterMetricFamily(f"dayzero_{name}", name.replace("_", " "), value=value)


class ServerMetrics:
    def __init__(self, counts: Callable[[], dict], open_requests: Callable[[], int]):
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
        self.registry.register(EngineCollector(counts, open_requests))

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
