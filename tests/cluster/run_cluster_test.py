#!/usr/bin/env python3
"""Functional test of the emulated cluster (scripts/cluster): 2 hosts (network namespaces) x 2 ranks,
1 Gbit/s links shaped by tc, MPI launched across the namespaces by the real mpirun. Checks that results
are right (exact for the lossless paths, bounded for int8 / top-k), that Open MPI found two nodes (the
hierarchical all-reduce sends half the ring's bytes between hosts), and that the bytes really crossed
the shaped links (the kernel's counters saw at least what the library counted). Small sizes; the timed
sweep is an experiment, not a test. The cluster is always torn down."""
import argparse, csv, io, os, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("--gradcomp", required=True)
ap.add_argument("--cluster", required=True)
a = ap.parse_args()
name = "t%d" % (os.getpid() % 1000000)
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def stats():
    out = subprocess.run([a.cluster, "stats", name], check=True, capture_output=True, text=True).stdout
    return {r["host"]: (int(r["tx_bytes"]), int(r["rx_bytes"])) for r in csv.DictReader(io.StringIO(out))}


subprocess.run([a.cluster, "up", "--name", name, "--hosts", "2", "--rate", "1gbit"], check=True)
try:
    before = stats()
    cases = ["ring/none", "hierarchical/none", "tree/none", "ring/int8", "hierarchical/int8", "allgather/topk:ratio=0.01"]
    cmd = [a.cluster, "run", name, "--ranks-per-host", "2", "--timeout", "300", "--", a.gradcomp, "allreduce-perf",
           "-b", "1M", "-e", "1M", "-w", "1", "-n", "2", "-c", "1", "--csv", "--timeout", "60"]
    for c in cases:
        cmd += ["--case", c]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    print(run.stdout)
    if run.returncode != 0:
        print(run.stderr[-3000:])
    check(run.returncode == 0, "allreduce-perf ran across the two namespaces")
    rows = {f'{r["algorithm"]}/{r["codec"]}': r for r in csv.DictReader(io.StringIO(run.stdout))}
    check(len(rows) == len(cases), f"{len(cases)} rows")
    err = lambda k: float(rows[k]["relative_error"])
    check("ring/none" in rows and err("ring/none") == 0.0, "uncompressed ring equals the exact sum")
    check("hier/ring/none" in rows and err("hier/ring/none") < 1e-6, "hierarchical (uncompressed) within fp32 rounding")
    check("tree/none" in rows and err("tree/none") < 1e-6, "tree within fp32 rounding")
    check("ring/int8" in rows and err("ring/int8") < 0.05, "int8 ring error < 5 %")
    check("hier/ring/int8" in rows and err("hier/ring/int8") < 0.05, "hierarchical int8 error < 5 %")
    check("allgather/topk:ratio=0.01" in rows, "top-k through all-gather ran")
    if "ring/none" in rows and "hier/ring/none" in rows:
        ring_inter = int(rows["ring/none"]["inter_node_bytes_per_rank"])
        hier_inter = int(rows["hier/ring/none"]["inter_node_bytes_per_rank"])
        # 4 ranks on 2 nodes: the ring sends 2(P-1)/P * S through the busiest rank's inter-node link, the
        # hierarchical all-reduce 2(N-1)/N * S/L (N = 2 nodes, L = 2 ranks per node).
        S = 1 << 20
        check(ring_inter == 2 * 3 * S // 4 and hier_inter == S // 2,
              f"two nodes seen: inter-node bytes per rank ring {ring_inter}, hierarchical {hier_inter}")
    after = stats()
    crossed = sum(after[h][0] - before[h][0] for h in after)
    check(crossed > 2 * 1048576, f"the shaped links carried {crossed} bytes")
finally:
    subprocess.run([a.cluster, "down", name], check=False)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check(f"{name}-" not in left, "torn down")
print(f"{len(failures)} failure(s)" if failures else "cluster test passed")
sys.exit(1 if failures else 0)
