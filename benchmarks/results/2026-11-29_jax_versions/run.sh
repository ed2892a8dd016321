#!/usr/bin/env bash
# The project under jax 0.10.2 (this machine's Python 3.11) and under jax 0.11.2 and 0.12.0.1
# (Python 3.13 in a Debian 13 chroot on the same machine: jax 0.11 needs Python 3.12+):
# one demo epoch per version (and two more seeds under 0.10.2), then one checkpoint evaluated
# under each. Run as root from the repository root with nothing else training:
#   bash benchmarks/results/2026-11-29_jax_versions/run.sh
set -euo pipefail
here=benchmarks/results/2026-11-29_jax_versions
root=/opt/trixie
if [ ! -x $root/usr/bin/python3 ]; then
  apt-get install -y -q debootstrap
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    trixie $root http://deb.debian.org/debian
  cp /etc/hosts /etc/resolv.conf $root/etc/   # gloo (multi-process tests) resolves the host
  chroot $root apt-get install -y -q git        # the tests of the code version and launcher
  cp /etc/ssl/certs/ca-certificates.crt $root/etc/ssl/certs/
fi
mountpoint -q $root/proc || mount --bind /proc $root/proc
mountpoint -q $root/dev || mount --bind /dev $root/dev
mkdir -p $root/work && (mountpoint -q $root/work || mount --bind /work $root/work)
for version in 0.11.2 0.12.0.1; do
  [ -x $root/opt/jax$version/bin/python ] || chroot $root bash -c "python3 -m venv \
    /opt/jax$version && cd $PWD && /opt/jax$version/bin/pip install -q -e '.[test]' \
    jax==$version jaxlib==$version"
done
# The demo's learning rate when this ran (1.0; configs/demo.py has used 0.5 since).
epoch="-m attnlm_jax.main --config=configs/demo.py --config.train.num_epochs=1 \
  --config.train.log_every_steps=10 --config.train.learning_rate=1.0"
export XLA_FLAGS=--xla_force_host_platform_device_count=1
for seed in 0 1 2; do
  rm -rf /tmp/demo_$seed && python $epoch --config.seed=$seed --workdir=/tmp/demo_$seed
  cp /tmp/demo_$seed/metrics.jsonl $here/jax0.10.2_seed$seed.jsonl
done
for version in 0.11.2 0.12.0.1; do
  chroot $root bash -c "cd $PWD && rm -rf /tmp/demo && XLA_FLAGS=$XLA_FLAGS \
    /opt/jax$version/bin/python $epoch --workdir=/tmp/demo"
  cp $root/tmp/demo/metrics.jsonl $here/jax${version}_seed0.jsonl
done
rm -rf $root/tmp/demo_0 && cp -r /tmp/demo_0 $root/tmp/demo_0   # 0.10.2's checkpoint
evaluate="-m attnlm_jax.main --mode=evaluate --split=test --workdir=/tmp/demo_0"
{ echo "jax 0.10.2: $(python $evaluate 2>/dev/null | tail -1)"
  for version in 0.11.2 0.12.0.1; do
    echo "jax $version: $(chroot $root bash -c "cd $PWD && /opt/jax$version/bin/python \
      $evaluate 2>/dev/null" | tail -1)"
  done; } > $here/evaluate_one_checkpoint.txt
python $here/compare.py > $here/output.txt
