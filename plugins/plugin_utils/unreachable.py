"""What the toolkit says of a node that became unreachable mid-run (the unreachable callback):
pure functions, so the words are tested without a run."""

from __future__ import annotations

from dataclasses import dataclass

ROLLOUT_PLAYS = ("Build, patch, switch and check the release",)


@dataclass(frozen=True)
class Lost:
    host: str
    play: str
    task: str
    cause: str


def one(lost: Lost) -> str:
    cause = " ".join(lost.cause.split())[:200] or "Ansible gave no cause"
    rollout = lost.play.startswith(ROLLOUT_PLAYS)
    stopped = (
        "the rollout stopped at this node's stage: no later stage started, and the nodes "
        "of the stages before it keep what they were switched to"
        if rollout
        else "the run stopped for this node"
    )
    return (
        f"specdeploy: {lost.host} became UNREACHABLE during '{lost.task}' (play '{lost.play}'; "
        f"{cause}). {stopped}. Nothing could be rolled back or marked on {lost.host}: it "
        "keeps what the run had got to (its server stopped only if the run had stopped it; "
        "out of the balancer's rotation only if the run had taken it out or the balancer's "
        "health checks fail it), and this run's deploy lock stays on it until the next run "
        f"from this controller breaks it as stale. Once {lost.host} answers over SSH again, "
        "run the same command again: it converges (a half-built release is built again); "
        "`make status` shows where the node stands."
    )


def report(lost: list[Lost]) -> str:
    return "\n".join(one(item) for item in lost)
