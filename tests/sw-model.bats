#!/usr/bin/env bats
# sw-model: init, info and convert on the transformers-made fixtures of
# tests/fixtures/models/ (tests/fixtures/make_models.py), and every kind of
# damaged model directory: exit 1, a message naming the file and the field
# or tensor, nothing written.
load helpers

FIX=$TOP/tests/fixtures/models

# A copy of a fixture to damage: copy NAME DIR
copy() {
	cp -r "$FIX/$1" "$2"
	chmod -R u+w "$2"
}

# Replace the first occurrence of a string in a binary file, same length: edit FILE OLD NEW
edit() {
	[ ${#2} -eq ${#3} ] || { echo "edit: '$2' and '$3' differ in length"; return 1; }
	OLD=$2 NEW=$3 perl -0777 -pi -e 'BEGIN { $o = $ENV{OLD}; $n = $ENV{NEW} } s/\Q$o\E/$n/' "$1"
	grep -qF -- "$3" "$1"
}

# Set a config.json field to a JSON value: setcfg DIR FIELD JSON
setcfg() {
	jq --argjson v "$3" ".$2 = \$v" "$1/config.json" >"$1/config.tmp" && mv "$1/config.tmp" "$1/config.json"
}

# The model in DIR must fail to load with exactly this message: bad DIR MESSAGE
bad() {
	run -1 --separate-stderr sw-model info "$1"
	[ "$output" = "" ]
	[ "$stderr" = "sw-model: $2" ] || { printf 'got:  %s\nwant: sw-model: %s\n' "$stderr" "$2"; false; }
}

@test "init writes a tiny model with the byte tokenizer, silently" {
	run -0 --separate-stderr sw-model init m
	[ "$output" = "" ]
	[ "$stderr" = "" ]
	for f in config.json model.safetensors generation_config.json tokenizer.json tokenizer_config.json; do
		[ -s "m/$f" ] || { echo "no m/$f"; false; }
	done
	run -0 jq -c '[.model_type, .hidden_size, .num_hidden_layers, .num_attention_heads, .num_key_value_heads,
		.intermediate_size, .vocab_size, .bos_token_id, .eos_token_id, .torch_dtype]' m/config.json
	[ "$output" = '["llama",128,4,4,2,384,261,256,[257,260],"float32"]' ]
	run -0 jq -c . m/generation_config.json
	[ "$output" = '{"bos_token_id":256,"do_sample":false,"eos_token_id":[257,260],"pad_token_id":258}' ]
	# 854,400 parameters in f32 after an 8-byte length and the header
	size=$(stat -c %s m/model.safetensors)
	[ "$size" -gt $((854400 * 4)) ]
	[ "$size" -lt $((854400 * 4 + 8192)) ]
	ls m | grep -v tmp
	[ "$(ls m | grep -c tmp)" -eq 0 ]
}

@test "init: the same seed gives the same file, another seed another" {
	sw-model init --seed 7 a
	sw-model init --seed 7 b
	sw-model init --seed 8 c
	cmp a/model.safetensors b/model.safetensors
	run ! cmp -s a/model.safetensors c/model.safetensors
	cmp a/config.json c/config.json
	# the threads split the work, never the numbers
	OMP_NUM_THREADS=1 sw-model init --seed 7 one
	OMP_NUM_THREADS=3 sw-model init --seed 7 three
	cmp a/model.safetensors one/model.safetensors
	cmp a/model.safetensors three/model.safetensors
}

@test "init: the named sizes, -v, and bf16" {
	run -0 --separate-stderr sw-model init -v -s small --dtype bf16 s
	[ "$output" = "" ]
	[ "$stderr" = "sw-model: s: small, 13181568 parameters, bf16, seed 0" ]
	run -0 jq -r .torch_dtype s/config.json
	[ "$output" = bfloat16 ]
	run -0 sw-model info --json s
	[ "$(jq .parameters <<<"$output")" = 13181568 ]
	size=$(stat -c %s s/model.safetensors)
	[ "$size" -gt $((13181568 * 2)) ]
	[ "$size" -lt $((13181568 * 2 + 8192)) ]
	# -q silences even -v's line
	run -0 --separate-stderr sw-model init -q -s tiny t
	[ "$stderr" = "" ]
	# the report shows a directory's control characters escaped: one line, nothing for the terminal
	d=$(printf 'm\nsw-model: fake\033[2J')
	run -0 --separate-stderr sw-model init -v -s tiny "$d"
	[ "$stderr" = 'sw-model: m\x0asw-model: fake\x1b[2J: tiny, '"$(sw-model info --json t | jq .parameters)"' parameters, f32, seed 0' ]
	[ -f "$d/config.json" ]
}

@test "init --config takes the shapes of a config.json, with the byte tokenizer's ids" {
	jq '.vocab_size = 320 | .hidden_size = 32 | .head_dim = 8' "$FIX/tiny-qwen2/config.json" >qwen.json
	run -0 --separate-stderr sw-model init -c qwen.json q
	run -0 jq -c '[.model_type, .vocab_size, .hidden_size, .tie_word_embeddings, .bos_token_id, .eos_token_id]' q/config.json
	[ "$output" = '["qwen2",320,32,true,256,[257,260]]' ]
	run -0 sw-model info --json q
	[ "$(jq -c '[.attention_bias, .tie_word_embeddings, .head_dim]' <<<"$output")" = '[true,true,8]' ]
	# too small a vocabulary for the byte tokenizer
	jq '.vocab_size = 200' "$FIX/tiny-qwen2/config.json" >small.json
	run -1 --separate-stderr sw-model init -c small.json x
	[ "$stderr" = "sw-model: small.json: field 'vocab_size' is 200, smaller than the byte tokenizer's 261" ]
	[ ! -e x/config.json ]
	# an unsupported config is refused before anything is written
	jq '.hidden_act = "gelu"' "$FIX/tiny-qwen2/config.json" >gelu.json
	run -1 --separate-stderr sw-model init -c gelu.json y
	[ "$stderr" = "sw-model: gelu.json: field 'hidden_act' is 'gelu': only 'silu' is supported" ]
	[ ! -e y ]
}

@test "init -s tiny-vl: a LLaVA with a CLIP tower, <image> in the tokenizer, the processor configs" {
	run -0 --separate-stderr sw-model init -v -s tiny-vl --seed 3 vl
	[ "$stderr" = "sw-model: vl: tiny-vl, 1038336 parameters, f32, seed 3" ]
	run -0 jq -c '[.architectures[0], .model_type, .image_token_index, .vision_feature_layer, .vision_feature_select_strategy, .projector_hidden_act, .text_config.model_type, .text_config.vocab_size, .vision_config.model_type, .vision_config.image_size, .vision_config.patch_size]' vl/config.json
	[ "$output" = '["LlavaForConditionalGeneration","llava",261,-2,"default","gelu","llama",262,"clip_vision_model",30,6]' ]
	run -0 jq -c '[.added_tokens[-1].id, .added_tokens[-1].content, .added_tokens[-1].special]' vl/tokenizer.json
	[ "$output" = '[261,"<image>",true]' ]
	run -0 jq -c '[.extra_special_tokens.image_token]' vl/tokenizer_config.json
	[ "$output" = '["<image>"]' ]
	run -0 jq -c '[.image_processor_type, .size.shortest_edge, .crop_size.height, .resample, .image_mean[0]]' vl/preprocessor_config.json
	[ "$output" = '["CLIPImageProcessor",30,30,3,0.48145466]' ]
	run -0 jq -c '[.processor_class, .patch_size, .num_additional_image_tokens, .image_token]' vl/processor_config.json
	[ "$output" = '["LlavaProcessor",6,1,"<image>"]' ]
	run -0 sw-model info vl
	[[ "$output" == *"architecture    LlavaForConditionalGeneration (model_type llama)"* ]]
	[[ "$output" == *"vision          clip_vision_model, image 30, patch 6: 25 tokens an image (id 261); 3 layers, hidden 64, intermediate 256, 4 heads, quick_gelu"* ]]
	[[ "$output" == *"projector       gelu, from hidden state -2, strategy default"* ]]
	run -0 sw-model info --json vl
	[ "$(jq -c '[.parameters, .vision.image_tokens, .vision.image_token_id, .vision.hidden_size]' <<<"$output")" = '[1038336,25,261,64]' ]
	# the weights under transformers 5's names, the patch embedding a 4-d conv weight
	run -0 sh -c 'head -c 20000 vl/model.safetensors | tr -d "\0" | grep -o "\"vision_tower.embeddings.patch_embedding.weight\":{[^}]*}"'
	[ "$output" = '"vision_tower.embeddings.patch_embedding.weight":{"dtype":"F32","shape":[64,3,6,6],"data_offsets":[3518208,3545856]}' ]
	# init -c with a LLaVA config: the image token must be the byte tokenizer's next id
	run -0 sw-model init -c vl/config.json vl2
	run -0 jq -c '[.added_tokens[-1].id, .added_tokens[-1].content]' vl2/tokenizer.json
	[ "$output" = '[261,"<image>"]' ]
	jq '.image_token_index = 7' vl/config.json >img7.json
	run -1 --separate-stderr sw-model init -c img7.json vl3
	[ "$stderr" = "sw-model: img7.json: field 'image_token_index' is 7; the byte tokenizer's image token is 261" ]
	[ ! -e vl3 ]
	# convert keeps the layout (the tokenizer and processor files copied)
	run -0 sw-model convert --dtype bf16 vl vl16
	[ -e vl16/preprocessor_config.json ]
	run -0 sw-model info --json vl16
	[ "$(jq .vision.image_tokens <<<"$output")" = 25 ]
}

@test "llava config.json: fields transformers 4 left out take LlavaConfig's and CLIPVisionConfig's defaults; bad ones are named" {
	sw-model init -s tiny-vl vl
	# llava-hf's files leave out what equals the defaults: -2, "default", "gelu", quick_gelu
	jq 'del(.vision_feature_layer, .vision_feature_select_strategy, .projector_hidden_act, .multimodal_projector_bias, .vision_config.hidden_act, .vision_config.layer_norm_eps, .vision_config.num_channels)' vl/config.json >c.json
	cp c.json vl/config.json
	run -0 sw-model info --json vl
	[ "$(jq -c '[.vision.vision_feature_layer, .vision.hidden_act, .vision.projector_hidden_act]' <<<"$output")" = '[-2,"quick_gelu","gelu"]' ]
	jq '.vision_feature_select_strategy = "middle"' c.json >vl/config.json
	bad vl "vl/config.json: field 'vision_feature_select_strategy' is 'middle', which is not supported"
	jq '.vision_config.model_type = "dinov2"' c.json >vl/config.json
	bad vl "vl/config.json: vision_config: field 'model_type' is 'dinov2': only clip_vision_model and siglip_vision_model are supported"
	jq 'del(.text_config)' c.json >vl/config.json
	bad vl "vl/config.json: field 'text_config' is missing"
	jq '.image_token_index = 262' c.json >vl/config.json
	bad vl "vl/config.json: field 'image_token_index' is 262, outside the vocabulary of 262"
	jq '.vision_feature_layer = 4' c.json >vl/config.json
	bad vl "vl/config.json: field 'vision_feature_layer' is 4; the tower has hidden states 0 to 3"
	jq '.vision_config.image_size = 32' c.json >vl/config.json
	bad vl "vl/config.json: vision_config: image_size 32 is not a multiple of patch_size 6"
}

@test "init refuses a directory that holds a model" {
	sw-model init m
	cp m/model.safetensors before
	run -1 --separate-stderr sw-model init --seed 3 m
	[ "$stderr" = "sw-model: m: already holds a model (config.json); choose a new directory" ]
	cmp before m/model.safetensors
}

@test "info: the tiny Llama fixture, as text" {
	run -0 --separate-stderr sw-model info "$FIX/tiny-llama"
	[ "$stderr" = "" ]
	want="$FIX/tiny-llama
  architecture    LlamaForCausalLM (model_type llama)
  layers          2, hidden 64, intermediate 128
  attention       4 heads, 2 key/value heads, head_dim 16
  rope            theta 10000, llama3 scaling: factor 8, low 1, high 4, original 64
  rms_norm_eps    1e-06
  vocabulary      300, bos 1, eos 2
  context         256 positions
  parameters      112448 (0.11M)
  weights         449.8 KB in f32
  train           21.0 MB: 1.8 MB weights, gradients, AdamW m and v (16 B/param) + 19.2 MB activations (4 x 256 tokens)
  generate        974.1 KB: 449.8 KB weights + 524.3 KB KV cache (512 B/token, 4 x 256 tokens)"
	[ "$output" = "$want" ] || { diff <(echo "$want") <(echo "$output"); false; }
}

@test "info --json: the tiny Qwen2 fixture, and the memory formulas" {
	run -0 --separate-stderr sw-model info --json --batch 2 --seq 100 "$FIX/tiny-qwen2"
	[ "$stderr" = "" ]
	j=$output
	[ "$(jq -c '[.architecture, .parameters, .tie_word_embeddings, .attention_bias, .qk_norm, .rope_scaling]' <<<"$j")" = \
		'["Qwen2ForCausalLM",93504,true,true,false,null]' ]
	# 2 layers, hidden 64, q 64, kv 32, intermediate 128, 4 heads, vocab 300
	act_per_token=$((2 * (4 * 64 + 2 * 64 + 2 * 32 + 4 * 128 + 4 * 100) + 2 * 64 + 2 * 300))
	[ "$(jq .train.state_bytes <<<"$j")" = $((93504 * 16)) ]
	[ "$(jq .train.activation_bytes <<<"$j")" = $((act_per_token * 4 * 200)) ]
	[ "$(jq .train.total_bytes <<<"$j")" = $((93504 * 16 + act_per_token * 800)) ]
	[ "$(jq .generate.kv_bytes_per_token <<<"$j")" = $((2 * 2 * 32 * 4)) ]
	[ "$(jq .generate.total_bytes <<<"$j")" = $((93504 * 4 + 512 * 200)) ]
}

@test "info: every fixture loads, bf16 and sharded included" {
	for m in tiny-llama tiny-llama-bf16 tiny-llama-sharded tiny-qwen2 tiny-qwen2-bf16 tiny-qwen3; do
		run -0 sw-model info --json "$FIX/$m"
		p=$(jq .parameters <<<"$output")
		case $m in
		tiny-llama*) [ "$p" = 112448 ] ;;
		tiny-qwen2*) [ "$p" = 93504 ] ;;
		tiny-qwen3)
			[ "$p" = 112512 ]
			[ "$(jq .qk_norm <<<"$output")" = true ]
			;;
		esac
	done
}

@test "convert: sharded to one f32 file is transformers' own file, byte for byte; f32 to bf16 too" {
	run -0 --separate-stderr sw-model convert "$FIX/tiny-llama-sharded" one
	[ "$stderr" = "" ]
	cmp one/model.safetensors "$FIX/tiny-llama/model.safetensors"
	cmp one/generation_config.json "$FIX/tiny-llama-sharded/generation_config.json"
	[ ! -e one/model.safetensors.index.json ]
	sw-model convert --dtype bf16 "$FIX/tiny-qwen2" half
	cmp half/model.safetensors "$FIX/tiny-qwen2-bf16/model.safetensors"
	run -0 jq -r .torch_dtype half/config.json
	[ "$output" = bfloat16 ]
	# bf16 back to f32 is exact
	sw-model convert half back
	sw-model convert --dtype bf16 back again
	cmp again/model.safetensors half/model.safetensors
	# the destination must be new
	run -1 --separate-stderr sw-model convert "$FIX/tiny-qwen2" half
	[ "$stderr" = "sw-model: half: already holds a model (config.json); choose a new directory" ]
}

@test "bad config.json: each unsupported or malformed field is named" {
	copy tiny-llama m
	setcfg m hidden_act '"gelu"'
	bad m "m/config.json: field 'hidden_act' is 'gelu': only 'silu' is supported"
	copy tiny-llama r
	setcfg r rope_parameters '{"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}'
	bad r "r/config.json: field 'rope_parameters.rope_type' is 'yarn': only 'default' and 'llama3' are supported"
	copy tiny-qwen2 s
	setcfg s use_sliding_window true
	bad s "s/config.json: field 'use_sliding_window': sliding-window attention is not supported"
	copy tiny-qwen2 e
	setcfg e num_experts 8
	bad e "e/config.json: field 'num_experts': a mixture of experts is not supported"
	copy tiny-llama t
	setcfg t model_type '"gemma"'
	bad t "t/config.json: field 'model_type' is 'gemma': only llama, qwen2 and qwen3 are supported"
	copy tiny-llama h
	setcfg h num_attention_heads '"4"'
	bad h "h/config.json: field 'num_attention_heads' is string, not an integer"
	copy tiny-llama k
	setcfg k num_key_value_heads 3
	bad k "k/config.json: field 'num_attention_heads' (4) is not a multiple of 'num_key_value_heads' (3)"
	copy tiny-llama j
	printf '{"model_type": "llama",\n "hidden_size": 64,,}\n' >j/config.json
	bad j "j/config.json: line 2, column 20: unexpected character, expected a string for object key"
	# a field twice: transformers (Python's json) reads the last, a lookup here the first
	copy tiny-llama n
	perl -0777 -pi -e 's/\{/{"num_hidden_layers": 1, /' n/config.json
	run -0 /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["num_hidden_layers"])' n/config.json
	[ "$output" = 2 ]
	bad n "n/config.json: the name \"num_hidden_layers\" appears twice in an object: readers keep different ones (Python's json the last), so the file is refused"
}

@test "bad directory: missing config.json, missing weights, a missing shard" {
	bad nowhere "nowhere/config.json: cannot open: No such file or directory"
	copy tiny-llama w
	rm w/model.safetensors
	bad w "w: no model.safetensors or model.safetensors.index.json"
	copy tiny-llama-sharded s
	rm s/model-00002-of-00004.safetensors
	bad s "s/model-00002-of-00004.safetensors: cannot open: No such file or directory"
	# a tensor twice in the index's weight_map, in two shards: which shard is it?
	copy tiny-llama-sharded i
	perl -0777 -pi -e 's/"weight_map": \{/"weight_map": {"lm_head.weight": "model-00002-of-00004.safetensors", /' i/model.safetensors.index.json
	grep -q '"lm_head.weight": "model-00002-of-00004.safetensors", ' i/model.safetensors.index.json
	bad i "i/model.safetensors.index.json: the name \"lm_head.weight\" appears twice in an object: readers keep different ones (Python's json the last), so the file is refused"
}

@test "bad safetensors: header length, header JSON, overlap, truncation, dtype, NaN" {
	copy tiny-llama a
	printf '\xff\xff\xff\x00\x00\x00\x00\x00' | dd of=a/model.safetensors conv=notrunc status=none
	bad a "a/model.safetensors: header length 16777215 runs past the end of the file (451936 bytes)"
	copy tiny-llama b
	printf 'X' | dd of=b/model.safetensors bs=1 seek=9 conv=notrunc status=none
	bad b "b/model.safetensors: bad header JSON at byte 9: unexpected character, expected a string for object key"
	copy tiny-llama c
	edit c/model.safetensors '"data_offsets":[76800,153600]' '"data_offsets":[76796,153596]'
	bad c "c/model.safetensors: tensor 'model.embed_tokens.weight': its data overlaps that of 'lm_head.weight'"
	copy tiny-llama d
	truncate -s -10 d/model.safetensors
	bad d "d/model.safetensors: tensor 'model.norm.weight': data_offsets end at byte 449792, past the 449782 bytes of data in the file (truncated?)"
	copy tiny-llama e
	edit e/model.safetensors '"F32"' '"I32"'
	bad e "e/model.safetensors: tensor 'lm_head.weight': dtype 'I32' is not supported (F32, F16 or BF16)"
	copy tiny-llama f
	printf '\x00\x00\xc0\x7f' | dd of=f/model.safetensors bs=1 seek=$((451936 - 4)) conv=notrunc status=none
	bad f "f/model.safetensors: tensor 'model.norm.weight': element 63 is NaN"
	copy tiny-llama g
	edit g/model.safetensors '"shape":[300,64],"data_offsets":[0,76800]' '"shape":[300,32],"data_offsets":[0,76800]'
	bad g "g/model.safetensors: tensor 'lm_head.weight': F32 of 9600 elements is 38400 bytes, data_offsets give 76800"
	# a tensor named twice: safetensors keeps the last, a lookup here the first
	copy tiny-llama t
	edit t/model.safetensors '"model.layers.1.mlp.up_proj.weight"' '"model.layers.0.mlp.up_proj.weight"'
	bad t "t/model.safetensors: the name \"model.layers.0.mlp.up_proj.weight\" appears twice in an object: readers keep different ones (Python's json the last), so the file is refused"
}

@test "bad safetensors: wrong shapes, missing and unexpected tensors" {
	copy tiny-llama s
	setcfg s intermediate_size 96
	bad s "s/model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight': shape [64, 128], but config.json makes it [64, 96]"
	copy tiny-llama m
	setcfg m num_hidden_layers 3
	bad m "m/model.safetensors: tensor 'model.layers.2.input_layernorm.weight' is missing"
	copy tiny-llama u
	setcfg u num_hidden_layers 1
	bad u "u/model.safetensors: tensor 'model.layers.1.input_layernorm.weight': is not a tensor of this llama model (unexpected)"
	copy tiny-llama t
	setcfg t tie_word_embeddings true
	bad t "t/model.safetensors: tensor 'lm_head.weight' differs from model.embed_tokens.weight, but config.json ties them"
	copy tiny-qwen2 q
	setcfg q tie_word_embeddings false
	bad q "q/model.safetensors: tensor 'lm_head.weight' is missing"
}

@test "usage errors exit 2" {
	run -2 --separate-stderr sw-model
	[ "${stderr_lines[0]}" = "sw-model: no command (init, info or convert)" ]
	[[ ${stderr_lines[1]} == "usage: sw-model "* ]]
	run -2 --separate-stderr sw-model frob m
	[ "${stderr_lines[0]}" = "sw-model: unknown command 'frob' (init, info or convert)" ]
	run -2 --separate-stderr sw-model info
	[ "${stderr_lines[0]}" = "sw-model: info takes one model directory" ]
	run -2 --separate-stderr sw-model convert a
	[ "${stderr_lines[0]}" = "sw-model: convert takes a source and a destination directory" ]
	run -2 --separate-stderr sw-model init --json m
	[ "${stderr_lines[0]}" = "sw-model: option '--json' does not apply to 'init'" ]
	run -2 --separate-stderr sw-model info --seed 1 m
	[ "${stderr_lines[0]}" = "sw-model: option '--seed' does not apply to 'info'" ]
	run -2 --separate-stderr sw-model init -s huge m
	[ "${stderr_lines[0]}" = "sw-model: unknown size 'huge' (tiny, small, base or tiny-vl)" ]
	run -2 --separate-stderr sw-model init -s tiny -c x.json m
	[ "${stderr_lines[0]}" = "sw-model: options '--size' and '--config' exclude each other" ]
	run -2 --separate-stderr sw-model init --dtype f16 m
	[ "${stderr_lines[0]}" = "sw-model: unknown dtype 'f16' (f32 or bf16)" ]
	run -2 --separate-stderr sw-model info --seq 0 m
	[ "${stderr_lines[0]}" = "sw-model: option '--seq' wants a whole number from 1 to 16777216, not '0'" ]
	[ ! -e m ]
}
