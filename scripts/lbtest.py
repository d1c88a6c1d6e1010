"""A real load balancer, end to end: 3 grps-py replicas behind HAProxy under steady load.

    python scripts/lbtest.py          (`make lbtest`; as root, it installs Debian's haproxy when missing)

Three replicas of the bundled project (each `grps-py serve` on its own loopback ports) behind HAProxy
(scripts/lbtest_haproxy.py: HTTP and gRPC-over-h2 frontends, health checks on /grps/v1/health/ready,
retries on refused connections only). Client threads send OIP HTTP infer and OIP gRPC ModelInfer of the
bundled classifier through HAProxy for the whole run, while the scenarios run one after another:

  offline   one replica taken offline (GET /grps/v1/health/offline on the replica itself), back online
            once HAProxy marked it DOWN                                   target: 0 failed requests
  rolling   each replica in turn, preStop-style: offline, wait until HAProxy marks it DOWN, SIGTERM,
            wait for the drain to end, start it on the same ports, wait until it is ready and HAProxy
            marks it UP                                                   target: 0 failed requests
  sigkill   one replica killed with SIGKILL                               target: only requests in
            flight on it fail (each was sent before the process was reaped, i.e. before its sockets
            closed, and at most one per client thread), the last one within fall*inter of the kill;
            HAProxy marks it DOWN within (fall+1)*inter (one inter of slack for check phase and timing)

A baseline window comes first. Prints answers and failures per window, each target PASS or FAIL; exit 0
when all pass. About 65-70 s on a busy 2-core machine, most of it replicas starting.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from lbtest_haproxy import Backend, Checks, HAProxy, HAProxyError, ensure_installed
from lbtest_load import Load
from lbtest_replicas import Replica, free_ports

REPLICAS = 3
MARK_TIMEOUT_S = 15.0  # HAProxy marks a server DOWN or UP within fall (rise) * inter: far less


@dataclass
class Scenario:
    """A window of the run: what happened in it (notes) and its targets (description -> met)."""

    name: str
    seconds: float = 0.0
    served: dict[str, int] = field(default_factory=dict)  # requests each replica took (HAProxy's count)
    notes: list[str] = field(default_factory=list)
    targets: dict[str, bool] = field(default_factory=dict)


@dataclass
class Run:
    replicas: list[Replica]
    haproxy: HAProxy
    load: Load
    checks: Checks
    settle_s: float
    scenarios: list[Scenario] = field(default_factory=list)

    @property
    def mark_down_s(self) -> float:
        return self.checks.fall * self.checks.inter_ms / 1000

    def window(self, name: str, body: Callable[[Scenario], None]) -> Scenario:
        """Run `body` as window `name`, with settle time before and after it inside the window."""
        scenario = Scenario(name)
        self.scenarios.append(scenario)
        self.load.window = name
        started, served = time.monotonic(), self.haproxy.per_server("stot")
        print(f"lbtest: {name} ...", flush=True)
        time.sleep(self.settle_s)
        body(scenario)
        time.sleep(self.settle_s)
        scenario.seconds = time.monotonic() - started
        scenario.served = {r: n - served.get(r, 0) for r, n in self.haproxy.per_server("stot").items()}
        return scenario

    def no_failures(self, scenario: Scenario) -> None:
        failed = sum(1 for f in self.load.failures if f.window == scenario.name)
        scenario.targets["0 failed requests"] = failed == 0

    # -- scenarios ------------------------------------------------------------------------------
    def baseline(self, scenario: Scenario) -> None:
        self.no_failures(scenario)

    def offline(self, scenario: Scenario) -> None:
        replica = self.replicas[0]
        replica.switch("offline")
        down = self.haproxy.wait_for(replica.name, "DOWN", MARK_TIMEOUT_S)
        time.sleep(self.settle_s)
        replica.switch("online")
        up = self.haproxy.wait_for(replica.name, "UP", MARK_TIMEOUT_S)
        scenario.notes.append(f"{replica.name}: DOWN {down:.2f} s after offline, UP {up:.2f} s after online")
        self.no_failures(scenario)

    def rolling(self, scenario: Scenario) -> None:
        exits = []
        for replica in self.replicas:
            replica.switch("offline")
            down = self.haproxy.wait_for(replica.name, "DOWN", MARK_TIMEOUT_S)
            code, drain = replica.terminate()
            exits.append(code)
            restarted = time.monotonic()
            replica.start()
            ready = replica.wait_ready()
            up = self.haproxy.wait_for(replica.name, "UP", MARK_TIMEOUT_S)
            scenario.notes.append(
                f"{replica.name}: DOWN {down:.2f} s after offline; SIGTERM to exit {drain:.2f} s (exit "
                f"{code}); ready {ready:.2f} s after start; UP {time.monotonic() - restarted:.2f} s after "
                f"start ({up:.2f} s after ready)"
            )
        scenario.targets["every replica drained and exited 0 on SIGTERM"] = exits == [0] * len(exits)
        self.no_failures(scenario)

    def sigkill(self, scenario: Scenario) -> None:
        replica = self.replicas[-1]
        redispatched_before = self.haproxy.per_server("wredis").get(replica.name, 0)
        killed_at = time.monotonic()
        replica.kill()  # SIGKILL, then reap it: its sockets are closed once it is reaped
        gone_at = time.monotonic()
        down = self.haproxy.wait_for(replica.name, "DOWN", MARK_TIMEOUT_S) + gone_at - killed_at
        time.sleep(self.settle_s)  # failures that come late still land in this window
        redispatched = self.haproxy.per_server("wredis").get(replica.name, 0) - redispatched_before
        failures = [f for f in self.load.failures if f.window == scenario.name]
        before = [f for f in failures if f.started <= killed_at]
        dying = [f for f in failures if killed_at < f.started <= gone_at]
        after = [f for f in failures if f.started > gone_at]
        last = max((f.ended - killed_at for f in failures), default=0.0)
        inter = self.checks.inter_ms / 1000
        scenario.notes += [
            f"{replica.name}: SIGKILL; reaped {gone_at - killed_at:.3f} s later; HAProxy marked it DOWN "
            f"{down:.2f} s after the kill (fall*inter = {self.mark_down_s:.2f} s)",
            f"{len(failures)} failed request(s): {len(before)} sent before the kill, {len(dying)} while it "
            f"died (its sockets still open), {len(after)} after it was gone; the last failed "
            f"{last:.3f} s after the kill",
            f"HAProxy sent {redispatched} request(s) that found {replica.name}'s port closed to another "
            f"replica (retry-on conn-failure, option redispatch)",
        ]
        scenario.targets["only requests in flight on the killed replica failed"] = (
            not after and len(failures) <= self.load.threads
        )
        scenario.targets[f"last failure within fall*inter ({self.mark_down_s:.2f} s) of the kill"] = (
            last <= self.mark_down_s
        )
        scenario.targets[f"marked DOWN within (fall+1)*inter ({self.mark_down_s + inter:.2f} s)"] = (
            down <= self.mark_down_s + inter
        )


def report(run: Run, total_s: float) -> bool:
    load = run.load
    print(
        f"\nlbtest: {REPLICAS} grps-py replicas behind HAProxy, {load.http_threads} HTTP + "
        f"{load.grpc_threads} gRPC client threads; checks inter {run.checks.inter_ms} ms, "
        f"fall {run.checks.fall}, rise {run.checks.rise}; {total_s:.0f} s in all"
    )
    names = [r.name for r in run.replicas]
    print(
        f"  {'scenario':10} {'seconds':>7} {'http ok':>8} {'http fail':>9} {'grpc ok':>8} {'grpc fail':>9}"
        f"   served by {' / '.join(names)}"
    )
    for s in run.scenarios:
        (h_ok, h_fail), (g_ok, g_fail) = load.counts(s.name, "http"), load.counts(s.name, "grpc")
        served = " / ".join(str(s.served.get(name, "-")) for name in names)
        print(f"  {s.name:10} {s.seconds:7.1f} {h_ok:8d} {h_fail:9d} {g_ok:8d} {g_fail:9d}   {served}")
    for s in run.scenarios:
        for note in s.notes:
            print(f"  {s.name}: {note}")
    messages = Counter((f.window, f.kind, f.message) for f in load.failures)
    for (window, kind, message), n in sorted(messages.items()):
        print(f"  failure in {window} ({kind}) x{n}: {message}")
    passed = True
    for s in run.scenarios:
        for target, ok in s.targets.items():
            print(f"  {'PASS' if ok else 'FAIL'}  {s.name}: {target}")
            passed = passed and ok
    return passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--http-threads", type=int, default=2)
    parser.add_argument("--grpc-threads", type=int, default=2)
    parser.add_argument("--settle-s", type=float, default=1.5, help="before and after each scenario")
    parser.add_argument("--inter-ms", type=int, default=500, help="HAProxy's health-check interval")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (configs and logs)")
    args = parser.parse_args()
    checks = Checks(inter_ms=args.inter_ms)
    began = time.monotonic()
    try:
        binary = ensure_installed()
    except HAProxyError as exc:
        print(f"lbtest: FAIL: {exc} (as root: apt-get install -y haproxy)")
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="grps-lbtest-"))
    ports = free_ports(2 * REPLICAS + 2)
    replicas = [Replica(f"r{i + 1}", ports[2 * i], ports[2 * i + 1], workdir) for i in range(REPLICAS)]
    backends = [Backend(r.name, r.http_port, r.grpc_port) for r in replicas]
    lb_http, lb_grpc = ports[-2], ports[-1]
    haproxy = HAProxy(workdir, lb_http, lb_grpc, backends, checks)
    load = Load(f"http://127.0.0.1:{lb_http}", f"127.0.0.1:{lb_grpc}", args.http_threads, args.grpc_threads)
    run = Run(replicas, haproxy, load, checks, args.settle_s)
    error = None
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_ready()
        haproxy.start(binary)
        for replica in replicas:
            haproxy.wait_for(replica.name, "UP", MARK_TIMEOUT_S)
        print(f"lbtest: replicas and HAProxy up in {time.monotonic() - began:.1f} s", flush=True)
        load.start()
        run.window("baseline", run.baseline)
        run.window("offline", run.offline)
        run.window("rolling", run.rolling)
        run.window("sigkill", run.sigkill)
    except (HAProxyError, RuntimeError, OSError, httpx.HTTPError) as exc:
        error = exc
    finally:
        load.stop()
        for replica in replicas:
            replica.kill()
        haproxy.stop()
    passed = report(run, time.monotonic() - began) and error is None
    if error is not None:
        print(f"  FAIL  the run stopped: {error}")
    if not passed:
        print(f"  HAProxy log (abnormal requests only, last lines):\n{haproxy.log_tail()}")
        for replica in replicas:
            print(f"  {replica.name} log (last lines):\n{replica.log_tail(10)}")
    print(f"lbtest: {'PASS' if passed else 'FAIL'} ({workdir if args.keep else 'temp dir removed'})")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
