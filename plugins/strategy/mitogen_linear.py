# The toolkit's strategy: Ansible's linear strategy run over mitogen (ansible.cfg: strategy =
# mitogen_linear). mitogen keeps one Python interpreter per node for a whole run instead of
# starting one per module, which cut the sandbox nodes' CPU in `make test` to 0.62x
# (docs/test-time.md, ci52). The version is pinned in requirements.lock.
from __future__ import annotations

DOCUMENTATION = r"""
name: mitogen_linear
short_description: The linear strategy over mitogen's persistent connections
description:
  - Ansible's C(linear) strategy with mitogen's connection and module runner
    (U(https://mitogen.networkgenomics.com/ansible_detailed.html)), as mitogen's own
    C(mitogen_linear) plugin, found through this collection so that ansible.cfg need not name a
    virtualenv's site-packages.
  - mitogen starts SSH with keepalives of its own (30 s x 10 unless the host variables
    C(mitogen_ssh_keepalive_interval) and C(mitogen_ssh_keepalive_count) are set), which come
    before ansible.cfg's C(ssh_args) on SSH's command line and so would win. Unless those
    variables are set, this strategy takes C(ServerAliveInterval) and C(ServerAliveCountMax)
    from the host's C(ssh_args), so a node cut off the network is given up in the same bounded
    time with or without mitogen.
  - On the local connection, Ansible logs in as the controller's user, so C(become) to that user
    runs no sudo; mitogen sees no user there and would run sudo. This strategy gives mitogen the
    controller's user, as Ansible does.
  - Two of mitogen's controller-side steps are done once per run instead of once per task, the
    list of installed collections (mitogen reads every collection's metadata again in each
    task's forked worker that runs a collection's module) and the compile of each module_utils
    file it scans for imports (again for every module that imports it). Same results, less
    controller CPU (docs/test-time.md, session 25).
  - A task's worker ends when the controller dies (SIGKILL, the OOM killer), on Linux. Ansible
    starts each worker in a session of its own, so a kill of the controller's process group does
    not reach it; under mitogen such a worker then waited for ever for a reply from mitogen's
    multiplexer, which had died with the group. The kernel now sends the worker SIGTERM when the
    controller dies, and Ansible's own handler ends the worker and what it started, as Ansible
    does to its workers when the controller stops cleanly.
author: specdeploy maintainers (!UNKNOWN)
"""

import builtins
import ctypes
import getpass
import os
import signal
from collections.abc import Callable

from ansible.errors import AnsibleError

try:
    import ansible.collections.list
    import ansible.executor.process.worker
    import ansible_mitogen.loaders
    import ansible_mitogen.module_finder
    import ansible_mitogen.planner
    import ansible_mitogen.strategy
    import ansible_mitogen.transport_config
except ImportError as missing:
    # said when a play starts, not at import, so the collection's plugins still load (ansible-doc,
    # ansible-test's import check) on a controller without mitogen
    MITOGEN_MISSING: ImportError | None = missing
else:
    MITOGEN_MISSING = None


def ssh_option(ssh_args: list[str], name: str) -> str | None:
    """The value of `-o Name=value` (or `-o "Name value"`) in an SSH argument list, the first
    given (SSH keeps the first), or None."""
    wanted = name.lower()
    for i, arg in enumerate(ssh_args):
        if arg == "-o" and i + 1 < len(ssh_args):
            option = ssh_args[i + 1]
        elif arg.startswith("-o") and len(arg) > 2:
            option = arg[2:]
        else:
            continue
        key, _equals, value = option.strip().replace("=", " ", 1).partition(" ")
        if key.lower() == wanted and value.strip():
            return value.strip()
    return None


def _answer_as_ansible_does(spec_class: type) -> None:
    """Patch mitogen's connection spec where it departs from Ansible (see DOCUMENTATION)."""
    given_interval = spec_class.mitogen_ssh_keepalive_interval
    given_count = spec_class.mitogen_ssh_keepalive_count
    given_remote_user = spec_class.remote_user

    def keepalive_interval(spec) -> object:
        given = given_interval(spec)
        return given if given is not None else ssh_option(spec.ssh_args(), "ServerAliveInterval")

    def keepalive_count(spec) -> object:
        given = given_count(spec)
        return given if given is not None else ssh_option(spec.ssh_args(), "ServerAliveCountMax")

    def remote_user(spec) -> object:
        # Ansible's local connection logs in as the controller's user when none is given, so
        # `become` to that same user runs no sudo (BECOME_ALLOW_SAME_USER is off); mitogen sees
        # no user there and wraps every become task in sudo, which a root controller need not have.
        given = given_remote_user(spec)
        if given is None and spec.transport() == "local":
            return getpass.getuser()
        return given

    spec_class.mitogen_ssh_keepalive_interval = keepalive_interval
    spec_class.mitogen_ssh_keepalive_count = keepalive_count
    spec_class.remote_user = remote_user


def memoized_compile(compile_source: Callable[..., object]) -> Callable[..., object]:
    """`compile` for mitogen's import scan: one code object per (name, source) for the process.

    mitogen compiles every module_utils file an Ansible module imports, again for each module it
    scans (a first deploy scans about 30, most of which import ansible.module_utils.basic and
    its 40 files); the scan runs in the controller's main process, so the cache lasts the run."""
    cache: dict[tuple[object, object, object], object] = {}

    def compile_once(source: object, filename: object, mode: object, *args, **kwargs) -> object:
        if args or kwargs:
            return compile_source(source, filename, mode, *args, **kwargs)
        key = (source, filename, mode)
        if key not in cache:
            cache[key] = compile_source(source, filename, mode)
        return cache[key]

    return compile_once


def collection_dirs_once(planner) -> Callable[[], None]:
    """Make mitogen's planner list the installed collections once per run; return what lists
    them, to be called in the controller's main process before the tasks' workers fork.

    mitogen lists them (ansible.collections.list.list_collection_dirs: every collection's
    metadata read) for each task that runs a collection's module, in that task's forked worker,
    where nothing it caches outlives the task: 2.9 of a two-node first deploy's 17.5 s of
    controller CPU."""
    found: list[bytes] = []
    listed = False

    def list_once() -> None:
        nonlocal listed
        if not listed:
            found[:] = list(ansible.collections.list.list_collection_dirs())
            listed = True

    def load_collections(invocation) -> None:
        list_once()
        for collection_path in found:
            invocation._extra_sys_paths.add(collection_path.decode("utf-8"))

    planner._load_collections = load_collections
    return list_once


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# looked up once in the controller; each forked worker inherits it (None: not Linux)
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def end_with_parent(parent_pid: int, signum: int = signal.SIGTERM) -> None:
    """In a freshly forked child: have the kernel send `signum` when the process that forked it
    (`parent_pid`) dies; if it died already, send it now. Nothing where the kernel offers no
    such thing (not Linux).

    The kernel sends it when the forking thread ends: Ansible forks its workers in the
    controller's main thread, whose end is the controller's."""
    if _PRCTL is None or _PRCTL(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        return
    if os.getppid() != parent_pid:  # the parent died between the fork and the prctl
        os.kill(os.getpid(), signum)


def workers_end_with_controller(worker_class: type) -> None:
    """Make each task's worker (ansible's WorkerProcess) end when the controller dies.

    Ansible starts its workers with setsid, so a kill of the controller's process group misses
    them; mitogen's multiplexer is in that group, and a worker waiting for its reply waited for
    ever (found in the test suite's killed-controller faults: one such process left per kill).
    SIGTERM runs the handler Ansible installs in the worker, which ends it and its process
    group."""
    if getattr(worker_class, "_specdeploy_ends_with_controller", False):
        return  # the plugin loaded again in the same controller
    worker_run, worker_start = worker_class.run, worker_class.start

    def run(self) -> None:
        end_with_parent(self._specdeploy_controller_pid)
        return worker_run(self)

    def start(self) -> None:
        self._specdeploy_controller_pid = os.getpid()
        return worker_start(self)

    worker_class.run = run
    worker_class.start = start
    worker_class._specdeploy_ends_with_controller = True


if MITOGEN_MISSING is None:
    workers_end_with_controller(ansible.executor.process.worker.WorkerProcess)
    _answer_as_ansible_does(ansible_mitogen.transport_config.PlayContextSpec)
    # module_finder calls the builtin `compile` by name: a module global of that name wins
    ansible_mitogen.module_finder.compile = memoized_compile(builtins.compile)
    _list_collections_once = collection_dirs_once(ansible_mitogen.planner)

    class StrategyModule(
        ansible_mitogen.strategy.StrategyMixin,
        ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True),
    ):
        """mitogen's mitogen_linear."""

        def run(self, iterator, play_context, result=0):
            _list_collections_once()  # before the first worker forks, so every worker has it
            return super().run(iterator, play_context, result)

else:
    from ansible.plugins.strategy.linear import StrategyModule as _Linear

    class StrategyModule(_Linear):  # type: ignore[no-redef]
        """Refuses to run: mitogen is not installed."""

        def __init__(self, *args, **kwargs) -> None:
            raise AnsibleError(
                "the strategy mitogen_linear (ansible.cfg) needs mitogen on the controller:"
                " `make setup` (pip install -r requirements.lock) installs the pinned version;"
                " or run plain Ansible with ANSIBLE_STRATEGY=linear"
                f" ({MITOGEN_MISSING})"
            )
