#!/bin/bash
# The plain torchrun commands for longctx_train. Every worker runs the same command line; torchrun sets
# RANK, LOCAL_RANK and WORLD_SIZE. Add your own flags at the end (see longctx_train --help).
set -euo pipefail

case "${1:-}" in
  single)   # one node, all its GPUs (DDP); --trainer.devices=8 without torchrun does the same
    torchrun --standalone --nproc_per_node=gpu --no-python longctx_train \
        --data.global_batch_size=64 "${@:2}" ;;
  fsdp)     # one node, FSDP2: parameters, gradients and optimizer state sharded over the GPUs
    torchrun --standalone --nproc_per_node=gpu --no-python longctx_train \
        --trainer.strategy=fsdp --trainer.precision=bf16 --data.global_batch_size=64 "${@:2}" ;;
  node)     # several nodes: run `torchrun.sh node NNODES NODE_RANK MASTER_ADDR` on each node (NODE_RANK 0..NNODES-1)
    torchrun --nnodes="$2" --node_rank="$3" --master_addr="$4" --master_port=29500 --nproc_per_node=gpu \
        --no-python longctx_train --data.global_batch_size=256 "${@:5}" ;;
  cpu)      # two CPU processes with gloo: the distributed code path on a laptop
    OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node=2 --no-python longctx_train \
        --trainer.accelerator=cpu --trainer.max_steps=50 --data.global_batch_size=8 --data.batch_size=4 "${@:2}" ;;
  *) echo "usage: $0 single|fsdp|node NNODES NODE_RANK MASTER_ADDR|cpu [longctx_train flags...]" >&2; exit 2 ;;
esac
