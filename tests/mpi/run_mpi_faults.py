#!/usr/bin/env python3
"""Runs the MPI path under mpirun (real processes), with and without injected faults, and checks what
every rank reports (tests/mpi/mpi_fault_main.cc). Each job runs under an outer timeout; a hang fails.

  sweep, -np {2,3,4,8}: every algorithm, sizes {0,1,17,1000,2^20+5}; all ranks hold the same bits,
                        lossless paths equal the exact sum.
  delay:                a rank late by half the deadline: everyone succeeds.
  kill / stop / exit:   survivors fail with TimeoutError or PeerFailure within 2x the deadline,
                        naming a peer (the victim's neighbours name the victim).
  mismatch:             every rank fails with CollectiveMismatch naming both counts.
  truncate:             the victim's right neighbour rejects the payload (DecodeError); nobody hangs.
  layout / chunk:       the victim has another ranks-per-node / pipeline chunk size: every rank fails
                        with CollectiveMismatch at once (before, the peers waited for the deadline).
  spelling:             the victim writes the codec differently but equivalently: everyone succeeds.
  threads:              a second thread of rank 0 is refused (ConcurrentUse) while its first one runs;
                        the first completes on every rank.
Open MPI's --enable-recovery keeps mpirun from killing the survivors when a rank dies, so they can
report; that is what a user running with a deadline gets.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

RESULT = re.compile(r"RESULT rank=(\d+) outcome=(\S+) seconds=([\d.]+) message=(.*)")
CASE = re.compile(r"CASE rank=(\d+) name=(\S+) hash=(\S+) exact=(\S)")
PID = re.compile(r"PID rank=(\d+) pid=(\d+)")


def run_job(args, np, extra, expect_results, wall_limit):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [args.mpirun, "-np", str(np), "--oversubscribe", "--enable-recovery", args.binary] + extra
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    lines, results, pids = [], {}, {}
    start = time.monotonic()

    def reader():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        seen = 0
        while time.monotonic() - start < wall_limit:
            while seen < len(lines):
                line = lines[seen]
                seen += 1
                if m := RESULT.match(line):
                    results[int(m.group(1))] = (m.group(2), float(m.group(3)), m.group(4))
                if m := PID.match(line):
                    pids[int(m.group(1))] = int(m.group(2))
            if len(results) >= expect_results:
                break
            if proc.poll() is not None:
                t.join(timeout=5)
                if seen == len(lines):
                    break
                continue
            time.sleep(0.05)
    finally:
        # A stopped or hung rank would keep mpirun alive: end the whole job, bounded.
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
    return results, lines


failures = []


def check(cond, what, lines=None):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
        if lines:
            print("\n".join("    " + l for l in lines[-30:]))


def sweep(args, np):
    # Several nodes at every size (hierarchical with a codec is refused on one node: it would never
    # compress): 2 ranks per node where that divides the world, else one.
    per_node = "2" if np % 2 == 0 and np > 2 else "1"
    extra = ["--fault", "sweep", "--timeout", "60", "--ranks-per-node", per_node]
    results, lines = run_job(args, np, extra, np, 240)
    check(len(results) == np and all(r[0] == "ok" for r in results.values()), f"sweep np={np}: every rank ok", lines)
    cases = {}
    for line in lines:
        if m := CASE.match(line):
            cases.setdefault(m.group(2), []).append((int(m.group(1)), m.group(3), m.group(4)))
    check(len(cases) == 65, f"sweep np={np}: 65 cases reported, got {len(cases)}", lines)
    for name, per_rank in cases.items():
        check(len(per_rank) == np, f"sweep np={np} {name}: all ranks reported")
        check(len({h for _, h, _ in per_rank}) == 1, f"sweep np={np} {name}: same bits on every rank {per_rank}")
        check(all(e != "0" for _, _, e in per_rank), f"sweep np={np} {name}: lossless result is the exact sum")
    print(f"sweep np={np}: {len(cases)} cases, identical on {np} ranks")


def fault(args, np, kind, deadline=2.0, victim=1, extra_args=()):
    extra = ["--fault", kind, "--victim", str(victim), "--timeout", str(deadline)] + list(extra_args)
    survivors = [r for r in range(np) if r != victim or kind in ("mismatch", "truncate", "delay", "layout", "chunk",
                                                                   "spelling", "threads")]
    results, lines = run_job(args, np, extra, len(survivors), 20 * deadline + 30)
    for r in survivors:
        check(r in results, f"{kind} np={np}: rank {r} reported (no hang)", lines)
        if r not in results:
            continue
        outcome, seconds, message = results[r]
        if kind in ("delay", "spelling", "threads"):
            check(outcome == "ok", f"{kind}: rank {r} got {outcome}: {message}")
            continue
        if kind in ("layout", "chunk"):
            check(outcome == "CollectiveMismatch", f"{kind}: rank {r} got {outcome}: {message}")
            check(seconds < deadline / 2, f"{kind}: rank {r} failed after {seconds:.2f}s, not at once")
            check(("per node" in message) if kind == "layout" else ("chunk=65536" in message),
                  f"{kind}: rank {r} names the difference: {message}")
            continue
        if kind == "mismatch":
            check(outcome == "CollectiveMismatch", f"mismatch: rank {r} got {outcome}: {message}")
            check("count=99999" in message and "count=100000" in message, f"mismatch: rank {r} names both counts: {message}")
            continue
        if kind == "truncate":
            if r == (victim + 1) % np:
                check(outcome == "DecodeError", f"truncate: rank {r} rejects the payload, got {outcome}: {message}")
            else:
                check(outcome in ("ok", "TimeoutError", "PeerFailure", "DecodeError"), f"truncate: rank {r}: {outcome}")
            check(seconds < 2 * deadline + 1, f"truncate: rank {r} done in {seconds:.2f}s")
            continue
        check(outcome in ("TimeoutError", "PeerFailure"), f"{kind}: rank {r} got {outcome}: {message}")
        check(seconds < 2 * deadline, f"{kind}: rank {r} failed after {seconds:.2f}s (deadline {deadline}s)")
        check(re.search(r"rank \d+", message) is not None, f"{kind}: rank {r} names a peer: {message}")
    if kind == "threads":
        check(any(l.startswith("CONCURRENT rank=0 second=ConcurrentUse") for l in lines),
              "threads: rank 0's second thread was refused with ConcurrentUse", lines)
    if kind in ("kill", "stop", "exit"):
        named = [r for r in survivors if r in results and f"rank {victim} " in results[r][2]]
        check(len(named) >= 1, f"{kind}: some survivor names the victim rank {victim}")
    print(f"{kind} np={np}: " + ", ".join(f"rank {r}: {results[r][0]} {results[r][1]:.2f}s" for r in sorted(results)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    args = ap.parse_args()
    for np in (2, 3, 4, 8):
        sweep(args, np)
    for kind in ("kill", "stop", "exit", "delay", "mismatch", "truncate", "chunk", "spelling", "threads"):
        fault(args, 4, kind)
    fault_layout = ["--ranks-per-node", "2"]
    fault(args, 4, "layout", extra_args=fault_layout)
    fault(args, 3, "kill", victim=0)
    fault(args, 8, "stop", victim=5)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all MPI checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
