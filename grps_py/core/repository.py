"""Models loaded, reloaded and unloaded while the server runs: Triton's model control modes and its
repository extension, over the executor's model sets (core/model_set.py).

`model_control` (server.yml) says who may change the models:
- `none`: nobody; the models of inference.yml load at start and stay (load and unload answer 501);
- `explicit`: the repository API (`load`, `unload`), and the CLI that calls it;
- `poll`: the server itself, when inference.yml or a file it names changes (checked every
  `repository_poll_s`): the whole file is applied at once.
Every change builds the new nodes beside the serving ones, loads and warms them up, and only then swaps
in a new model set: traffic moves at once, requests already running finish on the set they started on,
and the nodes no longer served are closed when their last request is answered. A load that fails
leaves the serving models as they were, and the index says why.

The DAG stays consistent: it follows a reloaded model to its new node; a change that would take away
a model the DAG runs is refused, unless it is an unload with `unload_dependents` (the DAG is then
unavailable until the model is back); the DAG itself is unloaded and loaded by its name.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

from grps_py.core.config import (
    DagSettings,
    InferenceSettings,
    ModelSettings,
    ServerSettings,
    load_inference_settings,
    parse_model_entry,
)
from grps_py.core.errors import ConfigError, InvalidInput, ModelLoadError, ModelNotFound, Unsupported
from grps_py.core.memory import release_memory
from grps_py.core.model_set import ModelSet
from grps_py.core.node import ModelNode
from grps_py.core.observer import SchedulerObserver
from grps_py.core.types import MessageBridge
from grps_py.core.untrusted import shown
from grps_py.core.warmup import Progress, no_progress, warm_up

log = logging.getLogger("grps_py.repository")

NONE, EXPLICIT, POLL = "none", "explicit", "poll"
LOADING, READY, UNLOADING, UNAVAILABLE = "LOADING", "READY", "UNLOADING", "UNAVAILABLE"
UNLOADED = "unloaded"
DAG_VERSION = "1"
_MAX_REASON_CHARS = 500


async def load_node(node: ModelNode, report: Progress = no_progress) -> None:
    """Load a node's instances in a thread (a model file may take seconds to read)."""
    started = time.perf_counter()
    report(f"loading model {node.key} ...")
    await asyncio.get_running_loop().run_in_executor(None, node.load)
    report(f"loading model {node.key} ... done ({time.perf_counter() - started:.1f} s)")
    log.info("model %s: loaded (%s)", node.key, node.summary())


def same_settings(a: ModelSettings, b: ModelSettings) -> bool:
    """Whether two entries configure the same model (where each stands in its file aside)."""
    return dataclasses.replace(a, index=0) == dataclasses.replace(b, index=0)


@dataclasses.dataclass(frozen=True)
class _Stamp:
    """What tells a file changed: its modification time and size (None: missing)."""

    mtime_ns: int
    size: int


def _stamp(path: Path) -> _Stamp | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return _Stamp(status.st_mtime_ns, status.st_size)


def model_files(settings: ModelSettings) -> list[Path]:
    """The files a model entry names: its model and converter files, label files, warmup samples."""
    paths = [settings.inferer_path, settings.converter_path]
    paths += [spec.label_path for spec in settings.outputs]
    if settings.warmup is not None:
        paths.append(settings.warmup.file)
    return [path for path in paths if path is not None]


class ModelHost(Protocol):
    """What the repository changes: the executor's model set, and how it makes and installs one."""

    models: ModelSet
    inference_settings: InferenceSettings
    bridge: MessageBridge
    observer: SchedulerObserver

    def make_node(self, settings: ModelSettings, fresh: bool = False) -> ModelNode: ...

    def install(self, models: ModelSet) -> None: ...


class ModelRepository:
    """The executor's models over time: who may change them, every version's state, the changes."""

    def __init__(self, executor: ModelHost, server: ServerSettings, inference: InferenceSettings) -> None:
        self._executor = executor
        self.mode = server.model_control
        self._poll_s = server.repository_poll_s
        self._unload_wait_s = server.shutdown_grace_s
        self._source = inference.source
        self._project_dir = inference.project_dir
        self._dag_wanted = True
        # Per (name, version): why its last load failed. A version that is served stays READY then.
        self._failures: dict[tuple[str, str], str] = {}
        self._unloaded: set[tuple[str, str]] = set()
        self._loading: set[tuple[str, str]] = set()
        self._retiring: list[ModelSet] = []  # replaced sets whose requests are still running
        self._lock = asyncio.Lock()  # one change at a time
        self._tasks: set[asyncio.Task[Any]] = set()
        # A worker of several (grps_py/workers): hands load and unload to every worker, this one too.
        self.everywhere: Callable[[dict[str, Any]], Awaitable[object]] | None = None
        self._stamps: dict[Path, _Stamp | None] = {}  # poll mode: the files as last applied
        self._unreadable: _Stamp | None = None  # poll mode: inference.yml as it was when it could not be read

    # -- the server's lifetime -----------------------------------------------------------------
    def start(self) -> None:
        """After start-up's loads: in poll mode, start watching the files."""
        if self.mode == POLL:
            self._stamps = self._file_stamps(self._executor.inference_settings)
            self._spawn(self._poll_every(self._poll_s))

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def live_nodes(self) -> list[ModelNode]:
        """Every node of the served set and of the replaced sets still finishing requests, each once."""
        nodes: dict[int, ModelNode] = {}
        for models in (self._executor.models, *self._retiring):
            for node in models.nodes.values():
                nodes.setdefault(id(node), node)
        return list(nodes.values())

    def unloading(self, model: str) -> bool:
        """Whether `model` (a key or a plain name) is served by a replaced set only: being unloaded."""
        current = self._executor.models
        if current.resolve(model) is not None:
            return False
        return any(models.resolve(model) is not None for models in self._retiring if model)

    # -- the index -----------------------------------------------------------------------------
    def index(self) -> list[dict[str, str]]:
        """Every model version known (the DAG too): READY, LOADING, UNLOADING or UNAVAILABLE, with why."""
        current = self._executor.models
        states: dict[tuple[str, str], tuple[str, str]] = {}
        for key in self._unloaded:
            states[key] = (UNAVAILABLE, UNLOADED)
        for key, reason in self._failures.items():
            states[key] = (UNAVAILABLE, reason)
        for models in self._retiring:
            for node in models.nodes.values():
                states[_name_version(node)] = (UNLOADING, "")
        for key in self._loading:
            states[key] = (LOADING, "")
        for node in current.nodes.values():
            version = _name_version(node)
            failure = self._failures.get(version)
            reason = f"a new load failed, this one keeps serving: {failure}" if failure else ""
            states[version] = (READY, reason)
        dag = current.dag_settings.name
        if all(name != dag for name, _ in states):
            served = current.dag is not None
            states[(dag, DAG_VERSION)] = (READY, "") if served else (UNAVAILABLE, current.dag_absent)
        return [
            {"name": name, "version": version, "state": state, "reason": reason}
            for (name, version), (state, reason) in sorted(states.items())
        ]

    # -- the repository API --------------------------------------------------------------------
    async def request_load(self, name: str, config: Mapping[str, Any] | None = None) -> None:
        """`load`, in every worker of the server (this one alone when it is the server)."""
        self._check_explicit("load")
        if self.everywhere is None:
            await self.load(name, config)
        else:
            await self.everywhere({"op": "load", "name": name, "config": config})

    async def request_unload(self, name: str, unload_dependents: bool = False) -> None:
        """`unload`, in every worker of the server."""
        self._check_explicit("unload")
        if self.everywhere is None:
            await self.unload(name, unload_dependents)
        else:
            await self.everywhere({"op": "unload", "name": name, "unload_dependents": unload_dependents})

    async def load(self, name: str, config: Mapping[str, Any] | None = None) -> None:
        """Load `name`, or reload it when it is served: from `config` (one model entry in inference.yml's
        format), else from inference.yml read again. Returns once the new version serves."""
        self._check_explicit("load")
        async with self._lock:
            current = self._executor.models
            dag_settings, dag_wanted = current.dag_settings, self._dag_wanted
            if config is not None:
                entries = [self._parse_config(name, config)]
            else:
                inference = self._read_file()
                entries = [m for m in inference.models if m.name == name]
                if not entries and name == inference.dag.name:
                    dag_settings, dag_wanted = inference.dag, True
                    needed = {node.model for node in dag_settings.nodes}
                    entries = [m for m in inference.models if m.key in needed and m.key not in current.nodes]
                elif not entries:
                    raise ModelNotFound(f"model '{shown(name)}' is not in {self._source}")
            models = {key: n.settings for key, n in current.nodes.items() if n.settings.name != name}
            models.update((s.key, s) for s in entries)
            rebuild = {s.key for s in entries}
            await self._change(models, dag_settings, dag_wanted, rebuild, dependents_may_go=False)
            self._dag_wanted = dag_wanted

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Stop serving every version of `name` (or the DAG, by its name); returns once the requests still
        running on it are answered (or after shutdown_grace_s: the index says UNLOADING until then)."""
        self._check_explicit("unload")
        async with self._lock:
            current = self._executor.models
            gone = [key for key, node in current.nodes.items() if node.settings.name == name]
            dag_wanted = self._dag_wanted
            if not gone:
                if name == current.dag_settings.name:
                    dag_wanted = False
                elif any(unloaded == name for unloaded, _ in self._unloaded):
                    return  # already unloaded: Triton answers success too
                else:
                    served = ", ".join(current.nodes)
                    raise ModelNotFound(f"unknown model '{shown(name)}'; served models: {served}")
            models = {key: n.settings for key, n in current.nodes.items() if key not in gone}
            replaced = await self._change(models, current.dag_settings, dag_wanted, (), unload_dependents)
            self._dag_wanted = dag_wanted
            self._unloaded.update(_name_version(current.nodes[key]) for key in gone)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(replaced.replaced().wait(), self._unload_wait_s)

    def _check_explicit(self, action: str) -> None:
        if self.mode != EXPLICIT:
            how = "inference.yml is watched instead" if self.mode == POLL else "models load at start-up only"
            raise Unsupported(
                f"model_control is '{self.mode}' ({how}): a model {action} needs model_control: explicit"
            )

    def _parse_config(self, name: str, config: Mapping[str, Any]) -> ModelSettings:
        try:
            source = f"the load of model '{shown(name)}': config"
            settings = parse_model_entry(dict(config), source, self._project_dir)
        except ConfigError as exc:
            raise InvalidInput(shown(str(exc), _MAX_REASON_CHARS)) from None
        if settings.name != name:
            raise InvalidInput(
                f"the config's name '{shown(settings.name)}' is not the model loaded, '{shown(name)}'"
            )
        return settings

    def _read_file(self) -> InferenceSettings:
        try:
            return load_inference_settings(Path(self._source), self._project_dir)
        except ConfigError as exc:
            raise InvalidInput(shown(str(exc), _MAX_REASON_CHARS)) from None

    # -- one change ----------------------------------------------------------------------------
    async def _change(
        self,
        models: Mapping[str, ModelSettings],
        dag_settings: DagSettings,
        dag_wanted: bool,
        rebuild: Collection[str],
        dependents_may_go: bool,
    ) -> ModelSet:
        """Serve exactly `models` (by key) and the DAG: build, load and warm up the nodes that are new,
        changed or to `rebuild`, keep the others, then swap. Returns the set it replaced."""
        executor = self._executor
        current = executor.models
        if current.dag is not None and dag_wanted and not dependents_may_go:
            _check_dag_keeps(dag_settings, current, models)
        build = {
            key: settings
            for key, settings in models.items()
            if key in rebuild
            or key not in current.nodes
            or not same_settings(current.nodes[key].settings, settings)
        }
        versions = {key: (s.name, s.version) for key, s in build.items()}
        self._loading.update(versions.values())
        built: dict[str, ModelNode] = {}
        failed = ""
        try:
            for key, settings in build.items():
                failed = key
                node = built[key] = executor.make_node(settings, fresh=True)
                await load_node(node)
                await warm_up(node)
            failed = ""
            nodes = {key: built.get(key) or current.nodes[key] for key in models}
            new = ModelSet(nodes, dag_settings, executor.bridge, self._source, dag_wanted)
        except BaseException as exc:
            for node in built.values():
                node.close()
            reason = _reason(exc)
            for key in [failed] if failed else versions:
                self._failures[versions[key]] = reason
            if isinstance(exc, (ModelLoadError, ConfigError)):
                raise InvalidInput(f"failed to load: {reason}") from None
            raise
        finally:
            self._loading.difference_update(versions.values())
        self._swap(current, new)
        for key in build:
            self._failures.pop(versions[key], None)
            self._unloaded.discard(versions[key])
        return current

    def _swap(self, current: ModelSet, new: ModelSet) -> None:
        for key, node in new.nodes.items():
            old = current.nodes.get(key)
            if old is None:
                node.statistics.reset()  # its warmup runs are not the clients'
            elif old is not node:
                node.adopt_statistics(old)  # a reload: the same model's counts continue
        self._executor.install(new)
        self._retiring.append(current)
        self._report_models()
        self._spawn(self._retire(current))
        log.info("serving models %s; dag: %s", list(new.nodes), "served" if new.dag else new.dag_absent)

    async def _retire(self, replaced: ModelSet) -> None:
        """Once the replaced set's last request is answered, close its nodes that no live set holds."""
        await replaced.replaced().wait()
        self._retiring.remove(replaced)
        live = {id(node) for node in self.live_nodes()}
        closed = [node for node in replaced.nodes.values() if id(node) not in live]
        for node in closed:
            node.close()
            log.info("model %s: unloaded", node.key)
        self._report_models()
        if closed:
            del closed, replaced
            await asyncio.get_running_loop().run_in_executor(None, release_memory)

    def _report_models(self) -> None:
        """Tell the metrics which models are served or still finishing requests."""
        labels: dict[str, tuple[str, str]] = {}
        for models in (self._executor.models, *self._retiring):
            for key, node in models.nodes.items():
                labels[key] = _name_version(node)
            if models.dag is not None:
                labels.setdefault(models.dag.name, (models.dag.name, DAG_VERSION))
        self._executor.observer.models_changed(labels)

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- poll mode -----------------------------------------------------------------------------
    async def _poll_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await self.poll()
            except Exception as exc:  # a failed poll is logged; the models served stay as they are
                log.error("%s changed, but applying it failed: %s", self._source, _reason(exc))

    async def poll(self) -> bool:
        """Apply inference.yml when it or a file it names changed since the last look; True if it did.
        A file that cannot be read is logged once, and looked at again when it changes."""
        async with self._lock:
            source = Path(self._source)
            stamps = self._file_stamps(self._executor.inference_settings)
            if stamps == self._stamps or stamps[source] == self._unreadable:
                return False
            try:
                inference = load_inference_settings(source, self._project_dir)
            except ConfigError as exc:
                self._unreadable = stamps[source]
                log.error("%s changed but cannot be read; the models stay as they were: %s", source, exc)
                return False
            self._unreadable = None
            before, self._stamps = self._stamps, self._file_stamps(inference)
            changed = {path for path, stamp in self._stamps.items() if before.get(path) != stamp}
            self._executor.inference_settings = inference
            models = {m.key: m for m in inference.models}
            rebuild = {m.key for m in inference.models if changed.intersection(model_files(m))}
            log.info("%s or a file it names changed: applying it", source)
            current = self._executor.models
            gone = [key for key in current.nodes if key not in models]
            await self._change(models, inference.dag, True, rebuild, dependents_may_go=True)
            self._dag_wanted = True
            self._unloaded.update(_name_version(current.nodes[key]) for key in gone)
            return True

    def _file_stamps(self, inference: InferenceSettings) -> dict[Path, _Stamp | None]:
        paths = [Path(self._source)] + [path for m in inference.models for path in model_files(m)]
        return {path: _stamp(path) for path in paths}


def _check_dag_keeps(dag: DagSettings, current: ModelSet, models: Mapping[str, ModelSettings]) -> None:
    """Refuse a change that takes away a model the served DAG runs."""
    for node in dag.nodes:
        if node.model in current.nodes and node.model not in models:
            raise InvalidInput(
                f"the DAG '{dag.name}' runs model '{node.model}' (node '{node.name}'): unload the model with "
                "unload_dependents to take the DAG down with it, or unload the DAG first"
            )


def _name_version(node: ModelNode) -> tuple[str, str]:
    return node.settings.name, node.settings.version


def _reason(exc: BaseException) -> str:
    """A failure in one line, for the index and the load's answer (never a traceback)."""
    text = exc.public_message if hasattr(exc, "public_message") else str(exc)
    first = (str(text).strip().splitlines() or [type(exc).__name__])[0]
    return shown(first, _MAX_REASON_CHARS)
