#!/usr/bin/env bash
# The trainer on real GPUs, in a few minutes, with a JSON summary (CI never has a GPU).
#
#   scripts/gpu_check.sh [OUT_DIR]        (default runs/gpu_check; needs `make setup` first)
#
# 1. DDP + torch's SyncBatchNorm + accumulation 2 over NCCL, one rank per visible GPU, 1 epoch;
# 2. --resume of that run for a second epoch;
# 3. convert of its best.pt on the CPU (CUDA hidden);
# 4. with 2+ GPUs: 2 ranks x batch 2 equal 1 rank x batch 4 (accumulation 2, --deterministic)
#    within 1e-4 relative, and NCCL throughput on all GPUs against one GPU (target >= 0.8 x N).
# Exit 0 when every check that could run passed; the summary says which ran and why not.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${1:-runs/gpu_check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu_check.log"
: > "$LOG"
edgeport() { "$PY" -m edgeport.cli "$@" >>"$LOG" 2>&1; }

NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$NGPU" -lt 1 ]; then
    echo '{"ran": false, "reason": "no CUDA device visible"}' | tee "$OUT/summary.json"
    exit 2
fi
DATA="$OUT/data"
[ -d "$DATA/images" ] || edgeport data synth --out "$DATA" --n 2048 --n-val 64 --imgsz 160
COMMON=(--data "$DATA" --imgsz 160 --device cuda --syncBN --eval-every 1000 --optimizer sgd --lr 0.02)
rm -rf "$OUT/ddp" "$OUT/one" "$OUT/eq2" "$OUT/eq1" "$OUT/conv"

t0=$(date +%s)
edgeport train "${COMMON[@]}" --out "$OUT/ddp" --world-size "$NGPU" --batch-size 32 --accumulate 2 --epochs 1
edgeport train --data "$DATA" --resume "$OUT/ddp/last.pt" --device cuda --world-size "$NGPU" --epochs 2
CUDA_VISIBLE_DEVICES="" edgeport convert "$OUT/ddp/best.pt" --imgsz 160 --out "$OUT/conv" || [ $? -eq 1 ]
if [ "$NGPU" -ge 2 ]; then
    edgeport train "${COMMON[@]}" --out "$OUT/one" --world-size 1 --batch-size 32 --accumulate 2 --epochs 1
    EQ=(--data "$DATA" --imgsz 160 --device cuda --syncBN --deterministic --eval-every 1000 --optimizer sgd --lr 0.02 --epochs 1)
    edgeport train "${EQ[@]}" --out "$OUT/eq2" --world-size 2 --batch-size 2 --accumulate 2
    edgeport train "${EQ[@]}" --out "$OUT/eq1" --world-size 1 --batch-size 4 --accumulate 2
fi

"$PY" - "$OUT" "$NGPU" "$(( $(date +%s) - t0 ))" <<'EOF'
import csv, json, sys
from pathlib import Path

import torch

out, ngpu, seconds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def rows(run):
    with open(out / run / "metrics.csv") as f:
        return list(csv.DictReader(f))


ddp = rows("ddp")
summary = {
    "ran": True, "gpus": ngpu, "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "seconds": seconds,
    "ddp": {"world_size": ngpu, "epochs": len(ddp), "images_per_s": float(ddp[0]["images_per_s"]),
            "allreduce_rounds_per_step": int(ddp[0]["allreduce_rounds"]) / max(int(ddp[0]["optimizer_steps"]), 1),
            "resumed_to_epoch": torch.load(out / "ddp" / "last.pt", weights_only=True)["epoch"]},
    "convert_cpu": json.loads((out / "conv" / "report.json").read_text())["passed"],
}
checks = [summary["ddp"]["resumed_to_epoch"] == 2, summary["convert_cpu"]]
if ngpu >= 2:
    one = float(rows("one")[0]["images_per_s"])
    ratio = summary["ddp"]["images_per_s"] / (ngpu * one)
    a = torch.load(out / "eq2" / "last.pt", weights_only=True)["model"]
    b = torch.load(out / "eq1" / "last.pt", weights_only=True)["model"]
    rel = max(float((a[k].double() - b[k].double()).abs().max() / b[k].double().abs().max().clamp_min(1e-12))
              for k in b if b[k].is_floating_point())
    summary["throughput"] = {"one_gpu_images_per_s": one, "scaling": ratio, "target": 0.8, "passed": ratio >= 0.8}
    summary["equivalence"] = {"max_rel_diff": rel, "tolerance": 1e-4, "passed": rel <= 1e-4}
    checks += [ratio >= 0.8, rel <= 1e-4]
else:
    summary["throughput"] = summary["equivalence"] = {"skipped": "needs 2 or more GPUs (NCCL runs one rank per GPU)"}
summary["passed"] = all(checks)
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps(summary, indent=2))
sys.exit(0 if summary["passed"] else 1)
EOF
