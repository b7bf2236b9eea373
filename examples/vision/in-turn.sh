#!/bin/sh
# examples/vision/in-turn.sh - the vision demo's prompt selection (an
# experiment's `select` command): the prompts of FILE in turn, $SW_BATCH for
# iteration $SW_ITER (1, 2, ...), from the first again after the last, so
# every training picture is asked about as often as the others (sw-pool's
# default choice by learning signal serves the same pictures again and
# again: sampled accuracy then rises on them while held-out accuracy does
# not).
#
# usage: in-turn.sh FILE      (SW_ITER and SW_BATCH from sw-run)
set -eu
f=${1:?usage: in-turn.sh FILE}
n=$(wc -l <"$f")
awk -v i="${SW_ITER:?SW_ITER: not set}" -v b="${SW_BATCH:?SW_BATCH: not set}" -v n="$n" \
	'{ k = (NR - 1 - (i - 1) * b) % n; if (k < 0) k += n; if (k < b) print }' "$f"
