#!/usr/bin/env bats
# sw-train with images on a LLaVA model (sw-model init -s tiny-vl): the
# language model and the projector learn, the vision tower is frozen (its
# bits unchanged) unless --train-vision; the trainer's old log-probs with
# the picture are the rollout's; bad media stop it naming the record.
load helpers

vl_setup() {
	sw-model init -s tiny-vl --seed 2 vl
	sw-shapes -n 4 -e 2 -s 5 d
	# cmp.py A B PREFIX...: for each prefix, its tensors and how many differ between two safetensors files
	cat >cmp.py <<'PY'
import json, struct, sys
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
print(" ".join("%d/%d" % (sum(a[k] != b[k] for k in a if k.startswith(p)), sum(k.startswith(p) for k in a))
               for p in sys.argv[3:]))
PY
}

@test "one SFT step on pictures: the LM and projector change, the tower's bits do not; --train-vision trains it" {
	vl_setup
	run -0 --separate-stderr sw-train -q -a sft --lr 1e-3 -m vl -o o1 d/sft.jsonl
	[ "$stderr" = "" ]
	run -0 python3 cmp.py vl/model.safetensors o1/model.safetensors vision_tower. multi_modal_projector. language_model.
	[ "$output" = "0/55 4/4 39/39" ]
	run -0 --separate-stderr sw-train -q -a sft --lr 1e-3 --train-vision -m vl -o o2 d/sft.jsonl
	run -0 python3 cmp.py vl/model.safetensors o2/model.safetensors vision_tower. multi_modal_projector.
	# (the last encoder layer and the post-layernorm are past the feature layer -2: no gradient reaches them)
	[ "$output" = "43/55 4/4" ]
	# the picture is in the forward: without it (another picture) the step differs
	jq -c '.media[0].path = "d/images/t1.png"' d/sft.jsonl >same.jsonl
	sw-train -q -a sft --lr 1e-3 -m vl -o o3 same.jsonl
	run -0 python3 cmp.py o1/model.safetensors o3/model.safetensors multi_modal_projector.
	[ "$output" = "4/4" ]
}

@test "GRPO on a rollout with pictures: the trainer's old log-probs are the rollout's (1e-5)" {
	vl_setup
	sw-rollout -m vl -n 4 --max-new-tokens 3 d/train.jsonl | sw-verify -r math >s.msgpack
	run -0 --separate-stderr sw-train -q -a grpo --lr 1e-3 --epochs 2 -m vl -o o --metrics m.jsonl s.msgpack
	[ "$stderr" = "" ]
	[ "$(jq -c '[.samples, .logprob_mismatch_max < 1e-5]' m.jsonl)" = '[16,true]' ]
}

@test "bad media stop sw-train naming the record; pictures for a text model too" {
	vl_setup
	jq -c 'if .id == "t3" then .media[0].path = "gone.png" else . end' d/sft.jsonl >bad.jsonl
	run -1 --separate-stderr sw-train -a sft -m vl -o o bad.jsonl
	[ "$stderr" = "sw-train: bad.jsonl: record 3: media[0]: file 'gone.png': No such file or directory" ]
	[ ! -e o ]
	jq -c '.prompt = "<image><image>" + .prompt' d/sft.jsonl >two.jsonl
	run -1 --separate-stderr sw-train -a sft -m vl -o o two.jsonl
	[ "$stderr" = "sw-train: two.jsonl: record 1: the prompt has 3 image placeholders for 1 image in 'media'" ]
	sw-model init -s tiny tx
	run -1 --separate-stderr sw-train -a sft -m tx -o o d/sft.jsonl
	[ "$stderr" = "sw-train: d/sft.jsonl: record 1: the sample has 1 image and the model is text only (not LLaVA)" ]
}

@test "a response that holds the image token stops sw-train naming the record" {
	vl_setup
	sw-rollout -f json -m vl -n 2 --max-new-tokens 3 d/train.jsonl | sw-verify -r math -f json >s.jsonl
	jq -c 'if .id == "t2/1" then .response_tokens = [5, 261] | .logprobs = [-1, -1] else . end' s.jsonl >img.jsonl
	run -1 --separate-stderr sw-train -a grpo -m vl -o o img.jsonl
	[ "$stderr" = "sw-train: img.jsonl: record 4: the response holds the image token (261): only a prompt takes pictures" ]
}
