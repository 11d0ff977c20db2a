# device-call-env.sh — the common start of a device-call script (bench/results/<date>-sNN/callN.sh), sourced there:
#     NAME=call4 . scripts/device-call-env.sh
# Why: every call script began with the same dozen lines (work dirs, the carried binaries, the result packer, the
# GPU's name, the model that fits the card); the recorded scripts keep theirs, new ones source this.
# Sets: W (work dir /tmp/w-NAME), R (results, packed by `save` into $OUT/res.tgz), C (the binaries unpacked from
# ${CARRY:-.gpucarry.tar.xz}, also NF_BUILD so nf-gpu-tests finds nf-convert / nf-synth), M (the synthetic model
# that fits: glm53:q2 on a card of > 120000 MiB, an H200, else glm53@32:q2, the 80 GB H100's) and S (nf-bench's
# backend and model arguments). The card and the model are written to $R/smi.txt and $R/model.txt.
W=/tmp/w-${NAME:-call}; R=$W/r; C=/tmp/c-${NAME:-call}
mkdir -p "$R" "$C"
tar xJf "${CARRY:-.gpucarry.tar.xz}" -C "$C"
export NF_BUILD=$C
save() { tar czf "$OUT/res.tgz" -C "$W" r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$R/smi.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi
echo "model $M" > "$R/model.txt"
S="--backend cuda --synthetic $M"
