#!/usr/bin/env bash
# probe.py under each of XLA's CPU matmul-library flags (benchmarks/xla_flags.py's sets),
# twice in turn, each line tagged with its XLA_FLAGS. From the repository root, nothing else
# running:
#   bash benchmarks/results/2026-11-29_small_model_gap/flags.sh > benchmarks/results/2026-11-29_small_model_gap/flags.jsonl
for round in 1 2; do
  for flags in "" "--xla_cpu_use_onednn=true" "--xla_cpu_use_xnnpack=true" \
      "--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT" \
      "--xla_cpu_experimental_ynn_fusion_type="; do
    XLA_FLAGS="$flags" PYTHONPATH=. python benchmarks/results/2026-11-29_small_model_gap/probe.py \
      2> /dev/null | python -c "
import json, sys
for line in sys.stdin:
  print(json.dumps({'round': $round, 'xla_flags': sys.argv[1], **json.loads(line)}))" "$flags"
  done
done
