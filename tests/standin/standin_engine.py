"""STAND-IN engine: continuous batching over a simulated step clock, and the spec-decode counters.

Every running request joins the next engine step (continuous batching, as in vLLM). A step
advances every request of the batch by ``1 + accepted`` tokens (speculation; ``accepted`` drawn
per request and step from the per-position acceptance rates) or by one token (none), and takes
``standin_timing`` step time for that batch size: so throughput depends on the concurrency, and
the speculative step cost on the batch size and k.

:class:`Batcher` is the pure part (no clock, no threads): the server's scheduler thread runs it
against the wall clock, sleeping to absolute deadlines (a step that ran late is caught up by the
next ones, so machine load moves single steps, not the throughput); :func:`closed_loop` runs it
on its own simulated clock, for tests that must not depend on machine load.

Legacy profiles (``spec_step_cost`` or ``tokens_per_s_spec`` set) keep the old per-request model:
every request decodes at ``tokens_per_s`` whatever the concurrency, a speculative step costs
``spec_step_cost`` decode steps.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import standin_timing

WORDS = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be",
    "by", "this", "are", "from", "at", "or", "an", "have", "not", "which", "one", "all", "were",
    "can", "but", "if", "more", "will", "their", "has", "there", "been", "when", "who", "they",
    "what", "so", "up", "out", "about", "into", "than", "them", "only", "some", "could", "time",
    "other", "new", "these", "two", "may", "first", "then", "do", "any", "like", "my", "now",
    "over", "such", "our", "man", "me", "even", "most", "made", "after", "also", "did", "many",
    "before", "must", "through", "years", "where", "much", "your", "way", "well", "down",
    "should", "because", "each", "just", "those", "people", "how", "too", "little", "state",
    "good", "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here",
    "between", "both", "life", "being", "under", "never", "day", "same", "another", "know",
    "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against",
    "go", "came", "right", "used", "take", "three", "sea", "light", "river", "house", "water",
    "under", "system",
]  # fmt: skip


@dataclass
class Request:
    n_tokens: int
    rng: random.Random
    produced: int = 0
    steps: list[int] = field(default_factory=list)  # accepted drafts of each step
    on_step: Callable[[int], None] | None = None  # called with the tokens a step produced
    done: threading.Event = field(default_factory=threading.Event)


def sample_accepted(rng: random.Random, rates: list[float]) -> int:
    """Accepted draft tokens of one step: P(accepted >= i + 1) = rates[i] (vLLM's per-position
    rate is accepted_at_position_i / drafts, so the rates never increase)."""
    u = rng.random()
    return sum(1 for r in rates if u < r)


class Batcher:
    """The batch of running requests and one engine step over it (no clock, no threads).

    With ``k_for`` (a batch-size schedule: running requests -> k, as vLLM's scheduler looks it
    up) each step drafts that k, and ``step_s`` takes (batch, k); else every step drafts ``k``.
    """

    def __init__(
        self,
        step_s: Callable[..., float],
        k: int,
        rates: list[float],
        k_for: Callable[[int], int] | None = None,
    ) -> None:
        self.step_s = step_s
        self.k = k
        self.rates = rates
        self.k_for = k_for
        self.running: list[Request] = []
        self.last_k = k

    def step(self) -> tuple[float, list[tuple[Request, int, int]]]:
        """(step seconds, [(request, tokens produced, drafts accepted)]) for one step."""
        batch = list(self.running)
        if self.k_for is not None:
            k = min(self.k, self.k_for(len(batch)))
            dt = self.step_s(len(batch), k)
        else:
            k = self.k
            dt = self.step_s(len(batch))
        self.last_k = k
        rates = self.rates[:k]
        out: list[tuple[Request, int, int]] = []
        for r in batch:
            acc = sample_accepted(r.rng, rates) if k else 0
            acc = min(acc, max(0, r.n_tokens - r.produced - 1))
            gained = acc + 1
            r.produced += gained
            if k:
                r.steps.append(acc)
            out.append((r, gained, acc))
        self.running = [r for r in self.running if r.produced < r.n_tokens]
        return dt, out


def step_function(prof: dict[str, object], k: int, rates: list[float]) -> Callable[[int], float]:
    """Seconds of one engine step at batch size B, from the profile (see module docstring)."""
    if "spec_step_cost" in prof or prof.get("tokens_per_s_spec"):
        tps = float(prof.get("tokens_per_s", 400.0))  # type: ignore[arg-type]
        if not k:
            return lambda b: 1.0 / tps
        if prof.get("tokens_per_s_spec"):
            per_step = 1.0 + sum(rates)
            spec_tps = float(prof["tokens_per_s_spec"])  # type: ignore[arg-type]
            return lambda b: per_step / spec_tps
        cost = float(prof.get("spec_step_cost", 1.25))  # type: ignore[arg-type]
        return lambda b: cost / tps
    timing = standin_timing.from_profile(prof)
    if not k:
        return timing.nospec_step_s
    return lambda b: timing.spec_step_s(b, k)


def step_function_k(prof: dict[str, object], rates: list[float]) -> Callable[[int, int], float]:
    """Seconds of one engine step at batch size B drafting k (a schedule's steps; k=0: no
    drafts, the drafter's first pass still runs)."""
    if "spec_step_cost" in prof or prof.get("tokens_per_s_spec"):
        fns = {}

        def legacy(b: int, k: int) -> float:
            if k not in fns:
                fns[k] = step_function(prof, k, rates)
            return fns[k](b)

        return legacy
    timing = standin_timing.from_profile(prof)
    return timing.spec_step_s


def schedule_lookup(schedule: list[list[int]], max_batch: int) -> Callable[[int], int]:
    """Running requests -> k for a validated schedule, as vLLM's scheduler expands it (inclusive
    ranges, a gap carries the previous k, the last k holds up to max_num_seqs and beyond)."""
    dense = [0] * (max_batch + 1)
    nxt, last = 1, schedule[0][2]
    for start, end, k in sorted(tuple(e) for e in schedule):
        for b in range(nxt, min(start, max_batch + 1)):
            dense[b] = last
        for b in range(max(start, nxt), min(end, max_batch) + 1):
            dense[b] = k
        nxt, last = max(nxt, end + 1), k
    for b in range(nxt, max_batch + 1):
        dense[b] = last
    return lambda b: dense[min(max(b, 1), max_batch)]


def closed_loop(
    step_s: Callable[..., float],
    k: int,
    rates: list[float],
    concurrency: int,
    requests: int,
    n_tokens: int = 128,
    seed: int = 0,
    k_for: Callable[[int], int] | None = None,
) -> float:
    """Output tokens/s of ``concurrency`` clients, each sending its next request when the last
    one finished, over ``requests`` requests: on the simulated clock only (no sleeping)."""
    b = Batcher(step_s, k, rates, k_for)
    rng = random.Random(seed)
    sent = 0
    clock = 0.0
    tokens = 0
    while sent < min(concurrency, requests):
        b.running.append(Request(n_tokens, random.Random(rng.random())))
        sent += 1
    while b.running:
        dt, out = b.step()
        clock += dt
        for r, gained, _ in out:
            tokens += gained
            if r.produced >= r.n_tokens and sent < requests:
                b.running.append(Request(n_tokens, random.Random(rng.random())))
                sent += 1
    return tokens / clock if clock > 0 else 0.0


class Engine:
    """The stand-in's engine: the scheduler thread, the counters /metrics and the logs show."""

    def __init__(self, args: argparse.Namespace, prof: dict[str, object]) -> None:
        self.args = args
        self.prof = prof
        self.faults: dict[str, object] = prof["faults"]  # type: ignore[assignment]
        self.model = args.model_tag or args.model or "facebook/opt-125m"
        self.names: list[str] = args.served_model_name or [self.model]
        self.spec = args.speculative_config
        self.k = int(self.spec.get("num_speculative_tokens", 0)) if self.spec else 0
        acc = prof.get("acceptance", [0.8, 0.65, 0.55])
        assert isinstance(acc, list)
        rates = [float(x) for x in acc][: self.k]
        while len(rates) < self.k:
            rates.append((rates[-1] * 0.8) if rates else 0.5)
        self.rates = rates
        sched = (self.spec or {}).get("num_speculative_tokens_per_batch_size")
        self.schedule = sched or None
        if self.schedule:
            lookup = schedule_lookup(self.schedule, int(args.max_num_seqs or 256))
            self.batcher = Batcher(step_function_k(prof, rates), self.k, rates, lookup)
        else:
            self.batcher = Batcher(step_function(prof, self.k, rates), self.k, rates)
        self.started = time.time()
        self.healthy_at: float | None = None
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.c = {
            "drafts": 0,
            "draft_tokens": 0,
            "accepted": 0,
            "prompt_tokens": 0,
            "generation_tokens": 0,
            "requests": 0,
            "steps": 0,  # engine steps (SGLang's decode log counts batches)
        }
        self.per_pos = [0] * self.k
        self.running = 0
        self.in_flight = 0  # HTTP requests not yet answered (the drain waits for them too)
        self.hung = threading.Event()
        self.draining = threading.Event()  # SIGTERM with --shutdown-timeout > 0
        self.backend = "TRITON_MLA"
        self.max_model_len = args.max_model_len or 4096
        self.template = ""
        self._thread: threading.Thread | None = None

    # ---- scheduling
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="engine-core", daemon=True)
        self._thread.start()

    def submit(self, prompt: str, n_tokens: int, on_step: Callable[[int], None] | None) -> Request:
        """Queue a request; it joins the next step. Its ``done`` event is set when finished."""
        rng = random.Random(hashlib.sha256(f"{self.args.seed}|{prompt}".encode()).digest())
        req = Request(n_tokens, rng, on_step=on_step)
        with self.wake:
            self.batcher.running.append(req)
            self.running = len(self.batcher.running)
            self.wake.notify()
        return req

    def _loop(self) -> None:
        anchor_wall = time.monotonic()
        sim = 0.0
        while True:
            with self.wake:
                while not self.batcher.running:
                    self.wake.wait()
                    anchor_wall, sim = time.monotonic(), 0.0  # idle: restart the clock
                dt, out = self.batcher.step()
                k = self.batcher.last_k
                self.running = len(self.batcher.running)
            sim += dt
            # Sleep to the step's absolute deadline: a late step is caught up by the next.
            delay = anchor_wall + sim - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self.lock:
                self.c["steps"] += 1
                for _req, gained, acc in out:
                    self.c["generation_tokens"] += gained
                    if k:  # a schedule's k=0 step drafts nothing: vLLM counts no draft
                        self.c["drafts"] += 1
                        self.c["draft_tokens"] += k
                        self.c["accepted"] += acc
                        for i in range(acc):
                            self.per_pos[i] += 1
            for r, gained, _ in out:
                if r.on_step is not None:
                    r.on_step(gained)
                if r.produced >= r.n_tokens:
                    r.done.set()

    def account_request(self, prompt_tokens: int) -> None:
        with self.lock:
            self.c["prompt_tokens"] += prompt_tokens
            self.c["requests"] += 1

    def text_for(self, prompt: str, n_tokens: int, temperature: float, seed: int | None) -> str:
        return "".join(self.words_for(prompt, n_tokens, temperature, seed))

    def words_for(
        self, prompt: str, n_tokens: int, temperature: float, seed: int | None
    ) -> list[str]:
        """One " word" per token: deterministic at temperature 0 (per attention backend)."""
        wrong = self.faults.get("wrong_text")
        if wrong == "empty":
            return [""] * n_tokens
        if temperature > 0 or wrong:
            rng = random.Random(None if seed is None or wrong else f"{seed}|{prompt}")
        else:
            rng = random.Random(hashlib.sha256(f"{self.backend}|{prompt}".encode()).digest())
        return [" " + rng.choice(WORDS) for _ in range(n_tokens)]
