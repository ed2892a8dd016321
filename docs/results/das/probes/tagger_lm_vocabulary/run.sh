# From the repository root, data root /work/shared/data (ATTNLM_DATA_DIR), 01609f8:
python -m attnlm_jax.main --mode=reproduce --table=das --rows=tagger --workdir=$HOME/attnlm_runs/das
python -m attnlm_jax.main --mode=train_tagger --config=configs/tagger.py \
  --config.data.lm_data_dir= --workdir=$HOME/attnlm_runs/das_probes/tagger_words
PYTHONPATH=. python docs/results/das/probes/tagger_lm_vocabulary/compare.py \
  $HOME/attnlm_runs/das_probes/tagger_words $HOME/attnlm_runs/das/tagger \
  $ATTNLM_DATA_DIR/pos/conll2000 $ATTNLM_DATA_DIR/ptb \
  > docs/results/das/probes/tagger_lm_vocabulary/output.json
