#!/usr/bin/env bash
# Train with torchrun: one process per GPU on this machine, or on several machines at once.
#
# One machine, every GPU:
#   bash scripts/torchrun.sh fit -c configs/presets/ddp.yaml
# Two machines: run on both, with the address of the first (NODE_RANK=0) as MASTER_ADDR:
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 bash scripts/torchrun.sh fit -c configs/presets/ddp.yaml
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 bash scripts/torchrun.sh fit -c configs/presets/ddp.yaml
# On CPUs (e.g. to try it out): NPROC_PER_NODE=2 bash scripts/torchrun.sh fit --trainer.accelerator=cpu
#
# The project reads torchrun's world size and sets --trainer.devices, --trainer.num_nodes and
# --trainer.strategy to match: leave them at their defaults. Logs and checkpoints go to ./logs
# of the folder you run this from (on several machines: a folder they share, or only node 0's
# copy holds them).
set -euo pipefail

project_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# --nproc-per-node: "gpu" starts one process per visible GPU; a number starts that many.
exec torchrun \
    --nnodes="${NNODES:-1}" \
    --node-rank="${NODE_RANK:-0}" \
    --nproc-per-node="${NPROC_PER_NODE:-gpu}" \
    --master-addr="${MASTER_ADDR:-127.0.0.1}" \
    --master-port="${MASTER_PORT:-29500}" \
    "$project_dir/main.py" "$@"
