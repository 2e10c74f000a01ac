"""STAND-IN engine timing: how long one engine step takes, with and without speculation.

A step decodes one token for each of the ``B`` running requests (no speculation), or verifies
``k`` drafted tokens plus one for each of them (``B * (k + 1)`` tokens in one target forward
pass) after ``k`` drafter steps. For a memory-bound sparse MoE target the forward pass reads
the weights of every expert that at least one of its tokens is routed to; with ``E`` routed
experts and ``top_k`` experts per token, routing treated as uniform and independent (MoESD,
arXiv 2505.19645, section 3), ``T`` tokens touch on average::

    E[distinct experts] = E * (1 - (1 - top_k / E) ** T)

so::

    target_step_s(T) = dense_s + expert_s * E[distinct](T) + token_s * T
    nospec_step_s(B) = target_step_s(B)
    spec_step_s(B, k) = target_step_s(B * (k + 1)) + k * (draft_s + draft_token_s * B)
    tokens per request and step = 1 + sum(per-position acceptance rates)   (accepted_i / drafts)

A verification of ``k + 1`` tokens of ONE request already touches several times the experts
one token does (26 of 64 for k=3, top-8), so at batch 1-2 speculation costs nearly as much as
it gains; at larger batches every forward pass touches all experts anyway and the extra
tokens are almost free until compute (``token_s``) dominates. That is the non-monotonic curve.

DEFAULT is FITTED (``fit_profile.py``, least squares on log throughput) to the real vLLM 0.20.2
measurements on one H200 in ``tests/fixtures/moe-speedup-h200`` (a 22 GB DeepSeek-V3-shaped
target, 64 routed experts, top-8, EAGLE-3 drafter; no speculation and k = 1, 3, 5 at
c = 1..64; see ../shared/gpu-recipe/moe-speedup/README.md). Standard library only: imported by
the stand-in server and by the k advisor's tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


def distinct_experts(n_experts: int, top_k: int, tokens: float) -> float:
    """Expected number of distinct experts ``tokens`` tokens are routed to (uniform routing)."""
    if n_experts <= 0 or top_k <= 0 or tokens <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


@dataclass(frozen=True)
class Timing:
    dense_s: float  # per target forward pass: attention, dense layers, launches
    expert_s: float  # per distinct routed expert whose weights the pass reads
    token_s: float  # per token in the pass (compute)
    draft_s: float  # per drafter step
    draft_token_s: float  # per request in a drafter step
    n_experts: int = 64  # 0: a dense target (no expert term)
    top_k: int = 8
    # A k=0 step of a batch-size schedule (vLLM >= 0.24.0): the drafter's first pass still
    # runs over the step's tokens to keep its KV cache in sync (llm_base_proposer.py of the
    # 0.24-0.26 wheels), nothing is drafted or verified. An estimate (one drafter layer under
    # CUDA graphs, about 2% of the c=1 no-spec step), not yet fitted to a 0.26.0 recording.
    k0_s: float = 0.00004

    def target_step_s(self, tokens: float) -> float:
        return (
            self.dense_s
            + self.expert_s * distinct_experts(self.n_experts, self.top_k, tokens)
            + self.token_s * tokens
        )

    def nospec_step_s(self, batch: int) -> float:
        return self.target_step_s(batch)

    def spec_step_s(self, batch: int, k: int) -> float:
        if k == 0:  # a schedule's k=0 step: the target decodes, the drafter's first pass runs
            return self.target_step_s(batch) + self.k0_s
        return self.target_step_s(batch * (k + 1)) + k * (self.draft_s + self.draft_token_s * batch)

    def output_tps(self, batch: int, k: int = 0, rates: list[float] | None = None) -> float:
        """Steady-state output tokens/s at ``batch`` running requests (k=0: no speculation)."""
        if k <= 0:
            return batch / self.nospec_step_s(batch)
        per_step = 1.0 + sum((rates or [])[:k])
        return batch * per_step / self.spec_step_s(batch, k)

    def speed_up(self, batch: int, k: int, rates: list[float]) -> float:
        return self.output_tps(batch, k, rates) / self.output_tps(batch)

    def scaled(self, factor: float) -> Timing:
        """Every cost times ``factor`` (the same curve shape, ``1/factor`` the throughput)."""
        return replace(
            self,
            dense_s=self.dense_s * factor,
            expert_s=self.expert_s * factor,
            token_s=self.token_s * factor,
            draft_s=self.draft_s * factor,
            draft_token_s=self.draft_token_s * factor,
            k0_s=self.k0_s * factor,
        )

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


# Fitted by fit_profile.py to tests/fixtures/moe-speedup-h200 (see the module docstring).
# Sum of squared log errors 0.35 over 7 no-spec and 15 speculative (k, c) medians: within the
# 15-25% run-to-run spread of the recordings at c <= 4, within about 10% above (k=5 at c=16,
# measured 0.98x, is the outlier: modelled 1.43x).
DEFAULT = Timing(
    dense_s=0.0014000,
    expert_s=0.00006635,
    token_s=0.00001305,
    draft_s=0.0012974,
    draft_token_s=0.0,
)
# Per-position acceptance (accepted_i / drafts) the recorded drafter reached at k=5.
DEFAULT_ACCEPTANCE = [0.80, 0.62, 0.46, 0.38, 0.33]

TIMING_KEYS = tuple(Timing.__dataclass_fields__)


def from_profile(prof: dict[str, object]) -> Timing:
    """The profile's ``timing`` mapping over DEFAULT; ``tokens_per_s`` (the single-request
    decode speed without speculation) rescales all costs so that c=1 decodes at that speed."""
    t = DEFAULT
    over = prof.get("timing") or {}
    if not isinstance(over, dict):
        raise ValueError("stand-in profile: 'timing' must be a mapping")
    unknown = sorted(set(over) - set(TIMING_KEYS))
    if unknown:
        raise ValueError(f"stand-in profile: unknown timing keys {unknown}")
    t = replace(t, **{k: (int(v) if k in ("n_experts", "top_k") else float(v))
                      for k, v in over.items()})  # fmt: skip
    tps = prof.get("tokens_per_s")
    if tps:
        t = t.scaled(t.output_tps(1) / float(tps))  # type: ignore[arg-type]
    return t
