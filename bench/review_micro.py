"""Micro-benchmark of the pure admission decision, ``admission.webhook.review.review``, alone.

The webhook's saturation throughput is bounded by the CPU it spends per review; this isolates
the decision itself (no HTTP, no TLS, no JSON parsing) on the payloads of
bench/webhook_load.py: the 8-GPU training pod of a Job, the same pod in Kueue's vocabulary
(the load benchmark's body), and a half-GPU share of it; and the same pod asking through DRA
(a ResourceClaimTemplate for 8 GPUs of a model, and one for a 40Gi share by consumable
capacity), given the template as the webhook's claim reader hands it over (the read itself is
one GET per template and 10 seconds, cached: docs/dra.md). CPU time (``time.process_time``) per
call over repeated batches: the median, and the minimum (the least disturbed by other work on a
shared machine, which still inflates CPU time through shared caches and cores).

With ``--before DIR`` the same measurement also runs against another copy of the ``admission``
package (e.g. ``git archive HEAD admission | tar -x -C DIR``), alternating batches between the
two in separate processes, so both columns come from one run. Results: bench/webhook_load.md,
section "review() alone".

    python3 bench/review_micro.py [--before DIR] [--rounds 5] [--calls 20000]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / "config" / "policy" / "sample-policy.yaml"


def payloads() -> dict[str, dict[str, Any]]:
    """The AdmissionRequests measured, built by the load benchmark's own payload function."""
    sys.path.insert(0, str(REPO / "bench"))
    from webhook_load import training_pod_review

    job = training_pod_review()["request"]
    kueue = training_pod_review(kueue=True)["request"]
    share = copy.deepcopy(job)
    assert isinstance(share, dict)
    share["object"]["metadata"]["annotations"] = {"berth.dev/gpu-fraction": "0.5"}
    share["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    out = {"job pod, 8 GPUs": job, "kueue pod, 8 GPUs": kueue,  # type: ignore[dict-item]
           "job pod, 0.5 GPU": share}
    for name, exactly in (
            ("DRA pod, 8 GPUs (template)", {
                "deviceClassName": "gpu.nvidia.com", "count": 8, "selectors": [{"cel": {
                    "expression": 'device.attributes["gpu.nvidia.com"].productName == '
                                  '"NVIDIA-A100-SXM4-80GB"'}}]}),
            ("DRA pod, 40Gi share (template)", {
                "deviceClassName": "gpu.nvidia.com",
                "capacity": {"requests": {"memory": "40Gi"}}})):
        dra = copy.deepcopy(job)
        spec = dra["object"]["spec"]
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpus"}]
        for ct in spec["containers"]:
            res = ct.setdefault("resources", {})
            for section in ("limits", "requests"):
                (res.get(section) or {}).pop("nvidia.com/gpu", None)
            res["claims"] = [{"name": "gpu"}]
        dra["_claims"] = {("ResourceClaimTemplate", "gpus"): {
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}}
        out[name] = dra
    return out


def worker(calls: int, batches: int) -> None:
    """Measure in this process (whichever ``admission`` is first on sys.path); print JSON."""
    from admission.policy import load_policy

    try:
        from admission.webhook import review
    except ImportError:  # a checkout from before admission/webhook/ was a package
        from admission.review import review  # type: ignore[no-redef]

    policy = load_policy(POLICY)
    out: dict[str, list[float]] = {}
    for name, request in payloads().items():
        claims = request.pop("_claims", None)
        if claims is not None:
            try:
                decision = review(request, policy, claims)
            except TypeError:  # a checkout from before DRA: nothing to compare
                continue
        else:
            decision = review(request, policy)
        assert decision.outcome == "mutated", (name, decision)
        args = (request, policy, claims) if claims is not None else (request, policy)
        for _ in range(min(calls, 2000)):  # warm caches
            review(*args)
        samples = []
        for _ in range(batches):
            start = time.process_time()
            for _ in range(calls):
                review(*args)
            samples.append((time.process_time() - start) / calls * 1e6)
        out[name] = samples
    print(json.dumps(out))


def run_worker(pythonpath: Path, calls: int, batches: int) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--calls", str(calls),
           "--batches", str(batches)]
    done = subprocess.run(cmd, env=env, cwd=pythonpath, capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"worker with PYTHONPATH={pythonpath} failed:\n{done.stderr}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a directory holding an older admission/")
    parser.add_argument("--rounds", type=int, default=5, help="processes per code version")
    parser.add_argument("--calls", type=int, default=5000, help="calls per timed batch")
    parser.add_argument("--batches", type=int, default=5, help="timed batches per process")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.calls, args.batches)
        return 0
    if args.before is not None and not any(
            (args.before / "admission" / f).is_file() for f in ("webhook/review.py", "review.py")):
        raise SystemExit(f"--before {args.before}: no admission/ with a review there; create it "
                         f"with: git archive HEAD admission | tar -x -C {args.before}")
    versions = {"after": REPO} | ({"before": args.before.resolve()} if args.before else {})
    samples: dict[str, dict[str, list[float]]] = {v: {} for v in versions}
    for _ in range(args.rounds):
        for version, path in versions.items():  # alternate: drift hits both alike
            for name, values in run_worker(path, args.calls, args.batches).items():
                samples[version].setdefault(name, []).extend(values)
    names = list(samples["after"])
    order = list(reversed(versions))  # before, after
    head = "| payload |" + "".join(f" {v}: median us/call |" for v in order)
    head += "".join(f" {v}: min |" for v in order)
    print(head + (" after/before (medians) | after/before (mins) |" if args.before else ""))
    print("|---|" + "---:|" * (2 * len(versions) + (2 if args.before else 0)))
    for name in names:
        have = [v for v in versions if samples[v].get(name)]
        medians = {v: statistics.median(samples[v][name]) for v in have}
        mins = {v: min(samples[v][name]) for v in have}
        row = f"| {name} |" + "".join(f" {medians[v]:.1f} |" if v in have else " - |"
                                      for v in order)
        row += "".join(f" {mins[v]:.1f} |" if v in have else " - |" for v in order)
        if args.before and len(have) < len(versions):
            row += " - | - |"
        elif args.before:
            row += f" {medians['after'] / medians['before']:.2f} |"
            row += f" {mins['after'] / mins['before']:.2f} |"
        print(row)
    batches = len(samples["after"][names[0]])
    print(f"\n{batches} batches of {args.calls} calls per payload and version; CPU time "
          "(time.process_time) per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
