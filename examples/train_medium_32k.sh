#!/bin/bash
# The GPU-native trainer's medium_32k recipe: d_model 1536, 12 layers, micro-batch 2 x 8 accumulation steps
# (effective batch 16 per process: 16 x GPUS), 32768-token sequences, 256-token chunks, activation checkpointing, mixed precision
# (--trainer.precision=auto: bf16 where the GPU has it). See it resolved: examples/train_medium_32k.sh --print_config
#
#   DATA_DIR   a folder made by longctx_prepare (default: prepared_32k), e.g.
#              longctx_prepare --data.dataset_name=local --data.dataset_config=your_text_folder --out prepared_32k
#   BLOCK      the sequence-mixing block (default: blade, which reads the 256-token chunks)
#   GPUS       processes on this machine (default: 1; above 1 longctx_train starts them with torchrun)
#
# Continue a stopped run:  examples/train_medium_32k.sh --resume         (the run directory runs/medium_32k)
# Watch it:                tensorboard --logdir runs/
set -euo pipefail
exec longctx_train --config medium_32k --data_dir "${DATA_DIR:-prepared_32k}" --model.block="${BLOCK:-blade}" \
    --trainer.devices="${GPUS:-1}" --trainer.run_name=medium_32k "$@"
