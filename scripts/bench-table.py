#!/usr/bin/env python3
"""Issue #12's table from a bench's results.csv.

    scripts/bench-table.py DIR/results.csv [TARGETS]

TARGETS is a comma-separated list (default: every target in the file, in
its order). Prints one markdown row per metric with the median over the
repeats of each target, then "crypt-xts vs best peer" (crypt-xts against
the best of gocryptfs and securefs, >1 = crypt-xts ahead; rates as they
are, times inverted) and crypt-cbc's time over crypt-xts's, where those
targets ran. Only verified runs count.
"""
import csv
import json
import statistics
import sys

# (label, workload, metric key or column, higher is better)
METRICS = [
    ("srctree untar (s)", "srctree", "untar_s", False),
    ("srctree lsR (s)", "srctree", "lsR_s", False),
    ("srctree md5 (s)", "srctree", "md5_s", False),
    ("srctree rm (s)", "srctree", "rm_s", False),
    ("bonnie create/s", "bonnie", "create_per_s", True),
    ("bonnie stat/s", "bonnie", "stat_per_s", True),
    ("bonnie delete/s", "bonnie", "delete_per_s", True),
    ("smallwrite4k (MiB/s)", "smallwrite4k", "MiBps", True),
    ("smallwrite512 (MiB/s)", "smallwrite512", "MiBps", True),
    ("copytree (s)", "copytree", "wall_s", False),
    ("sqlite (s)", "sqlite", "wall_s", False),
    ("randrw (IOPS)", "randrw", "iops", True),
    ("seqwrite (MiB/s)", "seqwrite", "MiBps", True),
    ("seqread (MiB/s)", "seqread", "MiBps", True),
    ("gzip (s)", "gzip", "wall_s", False),
    ("lame (s)", "lame", "wall_s", False),
    ("git (s)", "git", "wall_s", False),
    ("git clone (s)", "git", "clone_s", False),
    ("build (s)", "build", "wall_s", False),
]
PEERS = ["gocryptfs", "securefs"]


def fmt(v):
    if v is None:
        return "-"
    if v >= 1e4:
        return "%.3g" % v
    return "%.3g" % v


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    order = []
    for r in rows:
        if r["target"] not in order:
            order.append(r["target"])
    targets = sys.argv[2].split(",") if len(sys.argv) > 2 else order
    vals = {}
    for r in rows:
        if r["ok"] != "true" or r["verified"] != "true":
            continue
        m = json.loads(r["metrics"]) if r["metrics"] else {}
        for label, wl, key, _ in METRICS:
            if r["workload"] != wl:
                continue
            v = float(r[key]) if key in r else m.get(key)
            if v is not None:
                vals.setdefault((label, r["target"]), []).append(float(v))
    med = {k: statistics.median(v) for k, v in vals.items()}
    head = ["metric"] + targets
    if "crypt-xts" in targets:
        head.append("crypt-xts vs best peer")
    if "crypt-cbc" in targets and "crypt-xts" in targets:
        head.append("crypt-cbc / crypt-xts time")
    print("| " + " | ".join(head) + " |")
    print("|---" + "|---:" * (len(head) - 1) + "|")
    for label, _, _, higher in METRICS:
        cells = [label] + [fmt(med.get((label, t))) for t in targets]
        x = med.get((label, "crypt-xts"))
        if "crypt-xts" in targets:
            peers = [med[(label, p)] for p in PEERS if (label, p) in med]
            if x and peers:
                best = max(peers) if higher else min(peers)
                cells.append("%.2f" % (x / best if higher else best / x))
            else:
                cells.append("-")
        if "crypt-cbc" in targets and "crypt-xts" in targets:
            c = med.get((label, "crypt-cbc"))
            cells.append("%.2f" % (x / c if higher else c / x) if x and c else "-")
        print("| " + " | ".join(cells) + " |")
    src = ["srctree untar (s)", "srctree lsR (s)", "srctree md5 (s)", "srctree rm (s)"]
    sums = {t: sum(med.get((l, t), 0) for l in src) for t in targets}
    if sums.get("native") and sums.get("twin") and sums.get("crypt-xts"):
        print()
        print("srctree sum: native %.3f twin %.3f crypt-xts %.3f: twin/native %.2f, crypt/twin %.2f"
              % (sums["native"], sums["twin"], sums["crypt-xts"],
                 sums["twin"] / sums["native"], sums["crypt-xts"] / sums["twin"]))


if __name__ == "__main__":
    main()
