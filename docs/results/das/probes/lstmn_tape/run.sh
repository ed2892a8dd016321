# From the repository root at 48c4edf, data root /work/shared/data (ATTNLM_DATA_DIR), on a
# 2-core AMD EPYC with AVX-512, beside the lane (the das table's `das` row training):
for slots in 2 8; do
  python -m attnlm_jax.main --mode=train --config=configs/das.py:model=lstmn \
    --config.model.tape_slots=$slots --config.train.num_epochs=3 \
    --workdir=$HOME/attnlm_runs/das_probes/lstmn_tape$slots
  cp $HOME/attnlm_runs/das_probes/lstmn_tape$slots/{config.json,metrics.jsonl} \
    docs/results/das/probes/lstmn_tape/tape$slots/
done
# The tape as the sentence so far (one sentence per row), three epochs (run at ea73291):
python -m attnlm_jax.main --mode=train --config=configs/das.py:model=lstmn \
  --config.model.tape_slots=0 --config.data.span=sentence --config.data.bucket=true \
  --config.train.num_epochs=3 \
  --workdir=$HOME/attnlm_runs/das_probes/lstmn_sentence
cp $HOME/attnlm_runs/das_probes/lstmn_sentence/{config.json,metrics.jsonl} \
  docs/results/das/probes/lstmn_tape/sentence/
# The trained 35-slot row's attention (das_recipe's lstmn_tape35, then the das table's lstmn),
# one valid sentence at a time:
PYTHONPATH=. python docs/results/das/probes/lstmn_tape/attention.py \
  $HOME/attnlm_runs/das_recipe/lstmn_tape35 > docs/results/das/probes/lstmn_tape/attention.json
(cd docs/results/das/probes/lstmn_tape && python table.py)
