"""What `dayzero serve` exposes at /metrics (Prometheus text format): requests by route and status, tokens in and
out, time to first token and request latency, and the engine's state read at scrape time (sequences running and
waiting, free cache pages and state slots, steps, preemptions, speculative drafts). One registry per server."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from dayzero.runtime.llm_engine import LLMEngine

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class EngineCollector:
    """The engine's counts, read when scraped (plain reads of the engine thread's containers)."""

    def __init__(self, engine: LLMEngine, open_requests):
        self.engine, self.open_requests = engine, open_requests

    def collect(self):
        engine, stats = self.engine, self.engine.stats
        gauges = {"running_sequences": len(engine.scheduler.running),
                  "waiting_sequences": len(engine.scheduler.waiting),
                  "free_cache_pages": engine.blocks.num_free, "free_state_slot_groups": engine.states.num_free,
                  # pages only cached prefixes hold: given to running requests when they need them
                  "reclaimable_cache_pages": engine.blocks.num_reclaimable,
                  "cached_prefixes": len(engine.prefix_cache.prefixes) if engine.prefix_cache else 0,
                  "open_requests": self.open_requests()}
        for name, value in gauges.items():
            yield GaugeMetricFamily(f"dayzero_{name}", name.replace("_", " "), value=value)
        counters = {"engine_steps": stats.steps, "preemptions": stats.preemptions,
                    "draft_tokens": stats.drafted_tokens, "accepted_draft_tokens": stats.accepted_tokens,
                    "prefix_cache_hit_tokens": engine.prefix_cache.hit_tokens if engine.prefix_cache else 0}
        for name, value in counters.items():
            yield CounterMetricFamily(f"dayzero_{name}", name.replace("_", " "), value=value)


class ServerMetrics:
    def __init__(self, engine: LLMEngine, open_requests):
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
        self.registry.register(EngineCollector(engine, open_requests))

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
