#!/bin/sh
# bench/bench_vision.sh - a LLaVA's vision tower and projector in libsw
# beside transformers, and rollout with a picture beside text only, in one
# run:
#
#   - the tower + projector forward, and forward + backward into the tower's
#     and the projector's weights (bench/vision_bench.c beside
#     bench/vision_torch.py's get_image_features on PyTorch), on the same
#     random weights (written by transformers) and the same pixels, for
#     tiny-vl's CLIP tower (image 30, patch 6, hidden 64, 3 layers: 32
#     images a call) and a ViT-B/16-shaped one (image 224, patch 16, hidden
#     768, 12 layers, 86M parameters: NIMG_B images a call); check= on both
#     sides is sum(features * dfeat), the same number to rounding
#   - sw-rollout on `sw-model init --size tiny-vl` (random weights): NPROMPT
#     sw-shapes prompts with their picture, NGROUP responses each, beside the
#     same prompts with the <image> placeholder taken out (text only),
#     tokens generated a second
#
#   STEPS=5 STEPS_B=2 NIMG_B=2 NPROMPT=32 NGROUP=8 sh bench/bench_vision.sh
#
# Medians over STEPS timed calls after one warm-up (rollouts: over REPS
# runs; the ViT-B/16 tower: over STEPS_B).  Threads: $SW_THREADS, else every core, on both sides.
set -eu
. "$(dirname "$0")/env.sh"
bin=$B/bench/vision_bench
STEPS=${STEPS:-5}
STEPS_B=${STEPS_B:-2}   # the ViT-B/16 tower: a step takes seconds here
NIMG_B=${NIMG_B:-2}
NPROMPT=${NPROMPT:-32}
NGROUP=${NGROUP:-8}
NEW=${NEW:-32}
REPS=${REPS:-3}
SW_THREADS=${SW_THREADS:-$(nproc)}
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export SW_THREADS OMP_WAIT_POLICY
[ -x "$bin" ] || { echo "bench_vision: $bin is missing (make bench builds it)" >&2; exit 1; }
python3 -c 'import torch, transformers' 2>/dev/null || { echo "bench_vision: needs torch and transformers" >&2; exit 1; }

field() { printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
ms() { awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }'; }

tdir=$(bench_tmp vision)
trap 'rm -rf "$tdir"' EXIT

echo "threads $SW_THREADS, OMP_WAIT_POLICY=$OMP_WAIT_POLICY, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| tower | parameters (tower + projector) | images a call | forward: libsw | transformers | ratio | fwd+bwd: libsw | transformers | ratio | check libsw / transformers |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for size in tiny vitb16; do
	n=32 st=$STEPS
	[ $size = vitb16 ] && n=$NIMG_B st=$STEPS_B
	mkdir -p "$tdir/$size"
	made=$(python3 "$top/bench/vision_torch.py" make $size "$tdir/$size" $n 2>/dev/null)
	pt=$(python3 "$top/bench/vision_torch.py" time "$tdir/$size" "$st" 2>/dev/null)
	sw=$("$bin" "$tdir/$size" "$st")
	params=$(awk -v a="$(field tower_params "$made")" -v b="$(field projector_params "$made")" \
		'BEGIN { printf "%.2fM + %.2fM", a / 1e6, b / 1e6 }')
	f_sw=$(field fwd_s "$sw") f_pt=$(field fwd_s "$pt") b_sw=$(field fwdbwd_s "$sw") b_pt=$(field fwdbwd_s "$pt")
	echo "| $size ($(field image "$made") px, $(field tokens "$made") tokens) | $params | $n | $(ms "$f_sw") ms |" \
		"$(ms "$f_pt") ms | $(ratio "$f_pt" "$f_sw") | $(ms "$b_sw") ms | $(ms "$b_pt") ms |" \
		"$(ratio "$b_pt" "$b_sw") | $(field check "$sw") / $(field check "$pt") |"
	rm -rf "${tdir:?}/$size"
done
echo
echo "ratio: transformers' time over libsw's (above 1: libsw faster). transformers' attention: $(field attn "$pt")."
echo

# rollout: the same prompts with and without their picture
"$B/bin/sw-model" init --size tiny-vl --seed 1 "$tdir/vl" >/dev/null
(cd "$tdir" && "$B/bin/sw-shapes" -n "$NPROMPT" -e 1 -s 1 shapes >/dev/null)
jq -c 'del(.media) | .prompt |= sub("<image>\n"; "")' "$tdir/shapes/train.jsonl" >"$tdir/text.jsonl"
roll() { # FILE: the median of REPS runs' tokens a second, and the tokens of the last
	for r in $(seq "$REPS"); do
		t0=$(date +%s.%N)
		(cd "$tdir" && "$B/bin/sw-rollout" -q -m vl -n "$NGROUP" --seed "$r" --max-new-tokens "$NEW" -f json "$1") \
			>"$tdir/out.jsonl"
		t1=$(date +%s.%N)
		tok=$(jq -s 'map(.response_tokens | length) | add' "$tdir/out.jsonl")
		awk -v t="$tok" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f %d\n", t / (b - a), t }'
	done | sort -n | awk -v n="$REPS" 'NR == int((n + 1) / 2) { print }'
}
img=$(roll shapes/train.jsonl)
txt=$(roll text.jsonl)
set -- $img
i_rate=$1 i_tok=$2
set -- $txt
echo "| sw-rollout, tiny-vl (random weights), $NPROMPT prompts x $NGROUP responses, at most $NEW new tokens | tokens/s | tokens generated |"
echo "|---|---|---|"
echo "| one 30 x 30 picture a prompt (25 image tokens before the question) | $i_rate | $i_tok |"
echo "| the same prompts without the picture (text only) | $1 | $2 |"
echo "| picture / text only | $(ratio "$i_rate" "$1") | |"
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
