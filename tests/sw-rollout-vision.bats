#!/usr/bin/env bats
# sw-rollout with images on a LLaVA model (sw-model init -s tiny-vl: CLIP
# tower of 30x30 pictures, 25 image tokens an image, id 261): the pictures
# of a sample's media preprocessed and their placeholders expanded, the G
# responses forked from the prompt with its image, media passed through,
# --score giving generation's log-probs, the same stream under mpirun, and
# bad media (missing file, truncated PNG, unreadable EXIF, wrong placeholder count, a
# text-only model) named by file and record.
load helpers

# A tiny LLaVA and sw-shapes' pictures, in the test's directory.
vl_setup() {
	sw-model init -s tiny-vl --seed 2 vl
	sw-shapes -n 3 -e 2 -s 5 d
}

r() {
	local f=$1
	shift
	set -o pipefail
	sw-rollout -f json "$@" | jq -c "$f"
}

@test "images: G samples per prompt, prompt_tokens with the image expanded, media untouched, any batch the same" {
	vl_setup
	run -0 --separate-stderr r '[.id, .group, .media, (.response_tokens|length) == (.logprobs|length), .finish]' \
		-m vl -n 2 --max-new-tokens 5 d/train.jsonl
	[ "$stderr" = "" ]
	[ "${#lines[@]}" -eq 6 ]
	[ "${lines[0]}" = '["t1/0","t1",[{"type":"image","path":"d/images/t1.png"}],true,"length"]' ]
	[ "${lines[5]}" = '["t3/1","t3",[{"type":"image","path":"d/images/t3.png"}],true,"length"]' ]
	# <image> became 25 copies of id 261, in its place at the start of the prompt
	run -0 r '[(.prompt_tokens[:25] | all(. == 261)), (.prompt_tokens | map(select(. == 261)) | length), .prompt_tokens[25]]' \
		-m vl --max-new-tokens 2 d/eval.jsonl
	[ "${lines[0]}" = '[true,25,10]' ]
	# the same samples whatever the batch
	sw-rollout -m vl -n 3 --max-new-tokens 6 --seed 4 --batch 1 d/train.jsonl >b1
	sw-rollout -m vl -n 3 --max-new-tokens 6 --seed 4 --batch 8 d/train.jsonl >b8
	cmp b1 b8
}

@test "images: the picture conditions the responses (another picture, other log-probs)" {
	vl_setup
	jq -c 'select(.id == "t1")' d/train.jsonl >a.jsonl
	jq -c 'select(.id == "t1") | .media[0].path = "d/images/t2.png"' d/train.jsonl >b.jsonl
	run -0 r '.logprobs[0]' -m vl --temperature 0 --max-new-tokens 1 a.jsonl
	a=$output
	run -0 r '.logprobs[0]' -m vl --temperature 0 --max-new-tokens 1 b.jsonl
	[ "$output" != "$a" ]
}

@test "images: --score gives generation's log-probs (1e-5), prompt_tokens already expanded taken as they are" {
	vl_setup
	sw-rollout -m vl -n 2 --max-new-tokens 8 --temperature 0.8 d/train.jsonl >gen
	run -0 sh -c 'sw-rollout -m vl --score --temperature 0.8 --as s gen | sw-cat -f json | jq -s -c "map([.logprobs, .s] | transpose | map((.[0]-.[1])|fabs)) | flatten | [length, max < 1e-5]"'
	[ "$output" = '[48,true]' ]
	# from the prompt text (placeholders expanded here) the same
	sw-cat -f json gen | jq -c 'del(.prompt_tokens)' >text.jsonl
	run -0 sh -c 'sw-rollout -m vl --score --temperature 0.8 --as s text.jsonl | sw-cat -f json | jq -s -c "map([.logprobs, .s] | transpose | map((.[0]-.[1])|fabs)) | flatten | [length, max < 1e-5]"'
	[ "$output" = '[48,true]' ]
	# without its picture the response scores otherwise: the image is in the forward
	sw-cat -f json gen | jq -c 'del(.prompt_tokens) | .media[0].path = "d/images/t3.png"' | head -1 >other.jsonl
	run -0 sh -c 'sw-rollout -m vl --score --temperature 0.8 --as s other.jsonl | sw-cat -f json | jq -c "[.logprobs, .s] | transpose | map((.[0]-.[1])|fabs) | max > 1e-4"'
	[ "$output" = true ]
}

@test "images: bad media named by file and record, exit 1; --skip-invalid counts them" {
	vl_setup
	jq -c 'if .id == "t2" then .media[0].path = "nope.png" else . end' d/train.jsonl >missing.jsonl
	run -1 --separate-stderr sw-rollout -m vl -f json --max-new-tokens 2 missing.jsonl
	[ "$stderr" = "sw-rollout: missing.jsonl: record 2: media[0]: file 'nope.png': No such file or directory" ]
	[ "$(jq -s -c 'map(.id)' <<<"$output")" = '["t1/0"]' ]
	head -c 100 d/images/t1.png >trunc.png
	jq -c '.media[0].path = "trunc.png" | .id = "tr"' d/eval.jsonl | head -1 >trunc.jsonl
	run -1 --separate-stderr sw-rollout -m vl trunc.jsonl
	[ "$stderr" = "sw-rollout: trunc.jsonl: record 1: media[0]: file 'trunc.png': truncated PNG" ]
	# EXIF data that Pillow cannot read (transformers' load_image raises on it)
	cp "$TOP/tests/fixtures/image/bad-exif-nottiff.png" exif.png
	jq -c '.media[0].path = "exif.png"' d/eval.jsonl | head -1 >exif.jsonl
	run -1 --separate-stderr sw-rollout -m vl exif.jsonl
	[ "$stderr" = "sw-rollout: exif.jsonl: record 1: media[0]: file 'exif.png': bad PNG: its eXIf chunk is not EXIF data (no TIFF header)" ]
	[ "$output" = "" ]
	jq -c '.prompt = "<image><image>\n" + .prompt' d/eval.jsonl >two.jsonl
	run -1 --separate-stderr sw-rollout -m vl two.jsonl
	[ "$stderr" = "sw-rollout: two.jsonl: record 1: the prompt has 3 image placeholders for 1 image in 'media'" ]
	jq -c '.prompt = "no picture here"' d/eval.jsonl >none.jsonl
	run -1 --separate-stderr sw-rollout -m vl none.jsonl
	[ "$stderr" = "sw-rollout: none.jsonl: record 1: the prompt has 0 image placeholders for 1 image in 'media'" ]
	# --score names them the same
	run -1 --separate-stderr sw-rollout -m vl --score <(jq -c '.response = "2"' trunc.jsonl)
	[[ "$stderr" == *": record 1: media[0]: file 'trunc.png': truncated PNG" ]]
	# --skip-invalid: counted, the good prompts' samples out
	run -0 --separate-stderr sw-rollout -m vl -f json --skip-invalid --max-new-tokens 2 missing.jsonl trunc.jsonl d/eval.jsonl
	[ "$(jq -s -c 'map(.id)' <<<"$output")" = '["t1/0","t3/0","e1/0","e2/0"]' ]
	[ "${stderr_lines[0]}" = "sw-rollout: missing.jsonl: record 2: media[0]: file 'nope.png': No such file or directory (skipped)" ]
	[ "${stderr_lines[1]}" = "sw-rollout: trunc.jsonl: record 1: media[0]: file 'trunc.png': truncated PNG (skipped)" ]
	[ "${stderr_lines[2]}" = "sw-rollout: skipped 2 invalid records" ]
}

@test "images for a text-only model are an error; a LLaVA model without its processor file too" {
	vl_setup
	sw-model init -s tiny tx
	run -1 --separate-stderr sw-rollout -m tx d/eval.jsonl
	[ "$stderr" = "sw-rollout: d/eval.jsonl: record 1: the sample has 1 image and the model is text only (not LLaVA)" ]
	# text prompts on the LLaVA model need no pictures
	run -0 r '.id' -m vl --max-new-tokens 2 <(echo '{"id":"x","prompt":"hello"}')
	[ "$output" = '"x/0"' ]
	rm vl/preprocessor_config.json
	run -1 --separate-stderr sw-rollout -m vl d/eval.jsonl
	[[ "$stderr" == "sw-rollout: "*"vl/preprocessor_config.json"* ]]
}

@test "images under mpirun -np 2: the very bytes one process writes" {
	need_mpirun
	vl_setup
	sw-rollout -m vl -n 2 --max-new-tokens 6 d/train.jsonl d/eval.jsonl >one
	sw_mpirun -np 2 sw-rollout -m vl -n 2 --max-new-tokens 6 d/train.jsonl d/eval.jsonl >two
	cmp one two
	sw-rollout -m vl --score one >s1
	sw_mpirun -np 2 sw-rollout -m vl --score one >s2
	cmp s1 s2
}

@test "images: a drawn image token ends the response before it (no picture could fill it); --score refuses one" {
	vl_setup
	# at temperature 2 the random model draws id 261 now and then
	sw-rollout -f json -m vl -n 20 --max-new-tokens 16 --temperature 2 d/train.jsonl >s.jsonl
	run -0 jq -s -c '[(map(.response_tokens | index(261)) | map(select(. != null)) | length),
	                  (map(select(.finish == "stop" and ((.response_tokens | last) as $t | $t != 257 and $t != 260))) | length > 0)]' s.jsonl
	[ "$output" = '[0,true]' ]
	head -1 s.jsonl | jq -c '.response_tokens = [5, 261, 6] | del(.response)' >img.jsonl
	run -1 --separate-stderr sw-rollout -m vl --score img.jsonl
	[ "$stderr" = "sw-rollout: img.jsonl: record 1: the response holds the image token (261): only a prompt takes pictures" ]
}
