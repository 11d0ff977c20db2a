# session 8, device call (recorded in session 9 from the untracked file it left): see docs/benchmarks.md
set -x
R=$OUT/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .gpucarry-slim.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $OUT r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/smi.txt
BA="--backend cuda --synthetic glm53:q2 --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
$C/nf-bench $BA --dump-steps $R/dump-main.jsonl --dump-topk 200 > $R/dump-main.csv 2>$R/dump-main.err
$C/nf-bench-lat $BA --dump-steps $R/dump-lat.jsonl --dump-topk 200 > $R/dump-lat.csv 2>$R/dump-lat.err
cmp $R/dump-main.jsonl $R/dump-lat.jsonl > $R/dump-cmp.txt 2>&1; echo "cmp rc=$?" >> $R/dump-cmp.txt
i=0; for a in main lat lat main main lat lat main; do i=$((i+1)); b=$C/nf-bench; [ $a = lat ] && b=$C/nf-bench-lat; $b $BA > $R/ab-$i-$a.csv 2>/dev/null; done
save
cd $C
NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=iq2_xxs NF_GEMV_BENCH_CASES=gate_up timeout 120 ncu --set full --import-source yes -k regex:gemv_stream --launch-skip 5 --launch-count 1 -o $R/ncu-iq2 ./nf-gpu-tests --only gemv --bench > $R/ncu-iq2.log 2>&1
ncu -i $R/ncu-iq2.ncu-rep --page details > $R/ncu-iq2-details.txt 2>&1
ncu -i $R/ncu-iq2.ncu-rep --page source --csv --print-source sass > $R/ncu-iq2-sass.csv 2>&1
NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=q2_K NF_GEMV_BENCH_CASES=down timeout 120 ncu --set full --import-source yes -k regex:gemv_stream --launch-skip 5 --launch-count 1 -o $R/ncu-q2k ./nf-gpu-tests --only gemv --bench > $R/ncu-q2k.log 2>&1
ncu -i $R/ncu-q2k.ncu-rep --page details > $R/ncu-q2k-details.txt 2>&1
ncu -i $R/ncu-q2k.ncu-rep --page source --csv --print-source sass > $R/ncu-q2k-sass.csv 2>&1
xz -9 $R/*-sass.csv
save
cd -
# server smoke test: CUDA nf-server on the embedded model
export LD_LIBRARY_PATH=$C/lib
$C/nf-server -m models/tiny/nf-tiny-bf16.gguf --backend cuda --port 8123 > $R/server.out 2> $R/server.err &
SP=$!
for k in $(seq 1 60); do curl -s localhost:8123/v1/models > $R/models.json 2>/dev/null && break; sleep 0.5; done
curl -s localhost:8123/v1/chat/completions -H 'content-type: application/json' -d '{"model":"x","messages":[{"role":"user","content":"Write a haiku about the sea."}],"max_tokens":48,"temperature":0}' > $R/chat.json 2>&1
curl -sN localhost:8123/v1/messages -H 'content-type: application/json' -d '{"model":"x","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"Hello there"}]}' > $R/messages-sse.txt 2>&1
curl -s localhost:8123/v1/chat/completions -H 'content-type: application/json' -d '{"model":"x","messages":[{"role":"user","content":"Write a haiku about the sea."}],"max_tokens":48,"temperature":0}' > $R/chat2.json 2>&1
kill $SP; wait $SP; echo "server rc=$?" >> $R/server.err
$C/nf-server -m models/tiny/nf-tiny-bf16.gguf --backend cpu --port 8124 > $R/server-cpu.out 2> $R/server-cpu.err &
SP=$!
for k in $(seq 1 60); do curl -s localhost:8124/v1/models >/dev/null 2>&1 && break; sleep 0.5; done
curl -s localhost:8124/v1/chat/completions -H 'content-type: application/json' -d '{"model":"x","messages":[{"role":"user","content":"Write a haiku about the sea."}],"max_tokens":48,"temperature":0}' > $R/chat-cpu.json 2>&1
kill $SP; wait $SP
save
for ch in 4096 8192; do timeout 150 $C/nf-bench --backend cuda --synthetic glm53:q2 --frontiers 62000 --gen 8 --chunk $ch --warmup 16 > $R/prefill62k-chunk$ch.csv 2> $R/prefill62k-chunk$ch.err; save; done
ls -la $R
