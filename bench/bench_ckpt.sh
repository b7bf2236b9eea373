# bench/bench_ckpt.sh - what a run's checkpoint costs: sw-run's (the
# weights, the optimiser state, the pool and the loop's state, fsync'd,
# renamed into place and digested into the audit log) beside the same run
# built from BEFORE (a tree built with make: the code before a change), and
# beside a checkpoint as transformers' Trainer writes one of the same model
# and optimiser state (bench/ckpt_torch.py: save_pretrained and torch.save,
# then the same with an fsync of each file).
#
# The model is a random one of SmolLM2-135M's shapes (bench/grpo_trl.py
# make: 134.5M parameters, so a checkpoint with its AdamW moments is 1.6 GB).
# Each sw-run side runs ITERS (default 3) iterations of a GRPO step on one
# prompt and 2 responses of 4 tokens, so that the iterations are short and
# the run is mostly its checkpoints (--ckpt-every 1, the default); the sides
# take turns, each first in every other round, ROUNDS (default 3) rounds (an
# even number gives each side the first place as often).  A checkpoint's figure is the time
# from the iteration's audit record to the checkpoint's record (saving,
# syncing, digesting and recording it); the whole run's wall time is given
# too, and its start: from the command to the record of its first checkpoint
# (iteration 0: the run directory made, the weights stores loaded, the start
# model digested for the start record, that checkpoint written), and its
# resume: `sw-run --resume run --iters ITERS+1` after the run, from the
# command to its "resume" record (the log's chain and the last checkpoint
# checked against their records, the start model checked against the start
# record, the stores loaded from the checkpoint).  Medians.
#
# Then sw-train used on its own, `sw-train -m m -o out` (one GRPO step on the
# samples of the first sw-run side's last iteration, KL to m): the model
# directory it writes (weights, AdamW state, trainer_state.json, fsync'd and
# renamed into place), timed from the mkdir of its temporary directory to its
# rename (`strace -tt`), BEFORE and this build taking turns in the same way.
# Each side and each save starts after a sync, so that the dirty pages of
# the one before are not written back during it.
#
#   BEFORE=/tmp/wt-base sh bench/bench_ckpt.sh
set -eu
. "$(dirname "$0")/env.sh"
here=$top/bench
rounds=${ROUNDS:-3}
iters=${ITERS:-3}
python3 -c 'import torch, transformers' 2>/dev/null ||
	{ echo "bench_ckpt: needs torch and transformers" >&2; exit 1; }
tmp=$(bench_tmp ckpt)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
python3 "$here/grpo_trl.py" make m >/dev/null 2>&1
printf '{"id":"p%d","prompt":"Question %d: tell a short story."}\n' 1 1 2 2 3 3 4 4 5 5 6 6 >p.jsonl

# side NAME BUILD: one run, its checkpoints' times to NAME.ckpt, its wall time to NAME.whole
side() {
	rm -rf run
	sync # the last side's or save's dirty pages written back now, not during this one
	t0=$(date +%s.%N)
	PATH=$2/bin:$PATH sw-run -q -m m -p p.jsonl -o run --iters "$iters" -b 1 -n 2 --ref \
		--rollout "sw-rollout -m $tmp/m -n \"\$SW_GROUP\" --seed \"\$SW_SEED\" --max-new-tokens 4 --threads 2" \
		--verify 'sw-verify -r length,max=120,buffer=60,unit=chars' \
		--train "sw-train --algo grpo --lr 1e-6 --kl-coef 0.04 -j 2 --metrics \"\$SW_TRAIN_METRICS\""
	awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }' >>"$1.whole"
	PATH=$2/bin:$PATH sw-audit verify run >/dev/null
	t1=$(date -d "$(jq -r 'select(.event == "checkpoint" and .iter == 0) | .time' run/audit.log)" +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }' >>"$1.start"
	sync
	t0=$(date +%s.%N)
	PATH=$2/bin:$PATH sw-run -q --resume run --iters $((iters + 1))
	t1=$(date -d "$(jq -r 'select(.event == "resume") | .time' run/audit.log)" +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }' >>"$1.resume"
	# from each iteration's record to its checkpoint's
	jq -r 'select(.event == "iteration" or .event == "checkpoint") | [.event, .time] | @tsv' run/audit.log |
		awk -F'\t' '{ split($2, a, "T"); split(a[2], t, ":"); s = t[1] * 3600 + t[2] * 60 + t[3] }
			$1 == "iteration" { it = s } $1 == "checkpoint" && it { printf "%.3f\n", s - it; it = 0 }' >>"$1.ckpt"
}
med() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# save NAME BUILD: sw-train -o once under strace, the seconds from the temporary directory's mkdir to its rename
save() {
	rm -rf out out.tmp-*
	sync
	PATH=$2/bin:$PATH strace -f -tt -e trace=mkdir,rename -o st.txt sw-train -q -m m -o out --algo grpo \
		--lr 1e-6 --kl-coef 0.04 --ref m -j 2 train.msgpack >/dev/null
	awk '/mkdir\("out\.tmp-/ && !a { a = $2 } /rename\("out\.tmp-[0-9]*", "out"\)/ { b = $2 }
		function s(t, x) { split(t, x, ":"); return x[1] * 3600 + x[2] * 60 + x[3] }
		END { printf "%.3f\n", s(b) - s(a) }' st.txt >>"$1.save"
}
# turns F: F for both builds, each first in every other round: the first of a pair can pay for what the
# run before it left (a sw-train's first touches of memory a run's stores just freed: 2.3 to 5.8 s)
turns() {
	if [ $((r % 2)) = 1 ]; then
		[ -z "${BEFORE:-}" ] || "$1" before "$BEFORE/build"
		"$1" now "$B"
	else
		"$1" now "$B"
		[ -z "${BEFORE:-}" ] || "$1" before "$BEFORE/build"
	fi
}
: >now.ckpt; : >now.whole; : >now.start; : >before.ckpt; : >before.whole; : >before.start; : >now.save; : >before.save
: >now.resume; : >before.resume
load0=$(cut -d' ' -f1-3 /proc/loadavg)
r=0
while [ "$r" -lt "$rounds" ]; do
	r=$((r + 1))
	turns side
	# sw-train on its own trains on the samples of the run's last iteration
	[ -s train.msgpack ] || sw-cat "$(ls run/samples/iter-*.train.msgpack.zst | tail -n 1)" >train.msgpack
	turns save
done
HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error python3 "$here/ckpt_torch.py" m "$tmp" "$rounds" >torch.json
load1=$(cut -d' ' -f1-3 /proc/loadavg)

echo "Checkpoints of a 134.5M-parameter model with its AdamW state (medians; load $load0 before, $load1 after)"
echo
echo "| side | one checkpoint (s) | whole run of $iters iterations (s) | start: to the first checkpoint's record (s) | resume: to its record (s) |"
echo "|---|---|---|---|---|"
[ -z "${BEFORE:-}" ] || echo "| sw-run, BEFORE ($(git -C "$BEFORE" rev-parse --short HEAD 2>/dev/null || echo "$BEFORE")) | $(med before.ckpt) | $(med before.whole) | $(med before.start) | $(med before.resume) |"
echo "| sw-run, this build ($(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo tree)) | $(med now.ckpt) | $(med now.whole) | $(med now.start) | $(med now.resume) |"
jq -r '"| transformers Trainer: save_pretrained + torch.save (no fsync, no digest) | \(.save_s | sort | .[length / 2 | floor] | . * 1000 | round / 1000) | | | |",
       "| the same, each file fsync'"'"'d | \(.save_fsync_s | sort | .[length / 2 | floor] | . * 1000 | round / 1000) | | | |",
       "| bytes written by the peer | \(.bytes) | | | |"' torch.json
echo
[ -z "${BEFORE:-}" ] || awk -v a="$(med before.ckpt)" -v b="$(med now.ckpt)" 'BEGIN { printf "BEFORE / this build, one checkpoint: %.2fx\n", a / b }'
[ -z "${BEFORE:-}" ] || awk -v a="$(med before.start)" -v b="$(med now.start)" 'BEGIN { printf "BEFORE / this build, the start: %.2fx\n", a / b }'
echo "every start, s: this build $(tr '\n' ' ' <now.start)${BEFORE:+; BEFORE $(tr '\n' ' ' <before.start)}"
[ -z "${BEFORE:-}" ] || awk -v a="$(med before.resume)" -v b="$(med now.resume)" 'BEGIN { printf "BEFORE / this build, the resume: %.2fx\n", a / b }'
echo "every resume, s: this build $(tr '\n' ' ' <now.resume)${BEFORE:+; BEFORE $(tr '\n' ' ' <before.resume)}"
awk -v a="$(jq '.save_fsync_s | sort | .[length / 2 | floor]' torch.json)" -v b="$(med now.ckpt)" \
	'BEGIN { printf "transformers fsync'"'"'d / this build, one checkpoint: %.2fx\n", a / b }'
echo "every checkpoint, s: this build $(tr '\n' ' ' <now.ckpt)${BEFORE:+; BEFORE $(tr '\n' ' ' <before.ckpt)}"
echo
echo "sw-train -m m -o out alone, the model directory written (mkdir of its temporary to its rename, strace -tt):"
echo "this build $(med now.save) s (every one: $(tr '\n' ' ' <now.save))${BEFORE:+; BEFORE $(med before.save) s (every one: $(tr '\n' ' ' <before.save))}"
[ -z "${BEFORE:-}" ] || awk -v a="$(med before.save)" -v b="$(med now.save)" 'BEGIN { printf "BEFORE / this build, sw-train -o: %.2fx\n", a / b }'
