#!/usr/bin/env bats
# sw-sort: by cost and by field, stable, groups together and by total,
# spilling to disk with a small -S (the same output), buckets, bad input.
load helpers

@test "by cost: cost written, groups together, groups ordered by total" {
	sw-datagen -n 80 -s 3 >d.msgpack
	run -0 --separate-stderr sw-sort -f json d.msgpack
	[ "$stderr" = "" ]
	[ "${#lines[@]}" -eq 80 ]
	echo "$output" >out.jsonl
	# every sample once, unchanged but for cost
	diff -q <(jq -c 'del(.cost)' out.jsonl | sort) <(sw-cat -f json d.msgpack | jq -c . | sort)
	# each group is one contiguous run
	[ "$(jq -r .group out.jsonl | uniq | wc -l)" -eq 10 ]
	# group totals rise, and within a group the input order stays
	jq -s -e 'group_by(.group) | map(map(.cost) | add) | length == 10' out.jsonl
	jq -r .group out.jsonl | uniq >groups
	jq -s -r --rawfile g groups '($g | split("\n") | map(select(. != ""))) as $order
		| [$order[] as $x | map(select(.group == $x) | .cost) | add] | . == sort' out.jsonl | grep -qx true
	jq -r 'select(.group == "p3") | .id' out.jsonl | tr '\n' ' ' | grep -qx 'p3/0 p3/1 p3/2 p3/3 p3/4 p3/5 p3/6 p3/7 '
}

@test "--no-group: every sample by its own cost, -r reverses, stable on ties" {
	printf '%s\n' '{"id":"a","prompt_tokens":[1,2]}' '{"id":"b","prompt_tokens":[1]}' \
		'{"id":"c","prompt_tokens":[1,2]}' '{"id":"d","prompt_tokens":[1,2,3]}' >t.jsonl
	run -0 sh -c 'sw-sort --no-group t.jsonl | sw-cat -f json | jq -r .id | tr -d "\n"'
	[ "$output" = "bacd" ]
	run -0 sh -c 'sw-sort --no-group -r t.jsonl | sw-cat -f json | jq -r .id | tr -d "\n"'
	[ "$output" = "dacb" ]
}

@test "-k: numeric and string fields, groups by total or by smallest" {
	cat >k.jsonl <<'EOF'
{"id":"x/0","group":"x","reward":0.5,"name":"m"}
{"id":"y/0","group":"y","reward":0.1,"name":"z"}
{"id":"x/1","group":"x","reward":-0.4,"name":"b"}
{"id":"y/1","group":"y","reward":0.3,"name":"a"}
{"id":"s","reward":0.35,"name":"c"}
EOF
	# totals: x 0.1, s 0.35, y 0.4
	run -0 sh -c 'sw-sort -k reward k.jsonl | sw-cat -f json | jq -r .id | tr "\n" " "'
	[ "$output" = "x/0 x/1 s y/0 y/1 " ]
	run -0 sh -c 'sw-sort -k reward -r k.jsonl | sw-cat -f json | jq -r .id | tr "\n" " "'
	[ "$output" = "y/0 y/1 s x/0 x/1 " ]
	# strings: y by "a", x by "b", s by "c"
	run -0 sh -c 'sw-sort -k name k.jsonl | sw-cat -f json | jq -r .id | tr "\n" " "'
	[ "$output" = "y/0 y/1 x/0 x/1 s " ]
	run -0 sh -c 'sw-sort -k name --no-group k.jsonl | sw-cat -f json | jq -r .name | tr -d "\n"'
	[ "$output" = "abcmz" ]
	# the records are left as they were: no cost with -k
	run -0 sh -c 'sw-sort -k reward k.jsonl | sw-cat -f json | jq -c "has(\"cost\")" | sort -u'
	[ "$output" = "false" ]
}

@test "a small -S spills runs to TMPDIR and gives the same bytes, leaving nothing behind" {
	sw-datagen -n 1500 -s 8 >d.msgpack
	mkdir tmp
	sw-sort d.msgpack >mem.msgpack
	TMPDIR=$PWD/tmp sw-sort -S 64K d.msgpack >disk.msgpack
	cmp mem.msgpack disk.msgpack
	[ -z "$(ls tmp)" ]
	sw-sort --no-group -r d.msgpack >mem2.msgpack
	sw-sort --no-group -r -S 64K -T tmp d.msgpack >disk2.msgpack
	cmp mem2.msgpack disk2.msgpack
	sw-sort -k id --no-group -S 64K -T tmp d.msgpack | sw-cat -f json | jq -r .id >ids
	sort -c ids
	[ "$(wc -l <ids)" -eq 1500 ]
	# zstd input and output
	sw-cat -z d.msgpack >d.zst
	sw-sort -S 64K -T tmp -z d.zst | sw-cat | cmp - mem.msgpack
}

@test "many runs (more spills than open files allowed) are merged as they come: the same bytes under ulimit -n 96" {
	# ~150 spills of 64K: a descriptor a spill ran out of them (sw-sort: cannot create a temporary
	# file: Too many open files); now at most 63 runs a level are open
	sw-datagen -n 6000 -t 50 -s 3 >d.msgpack
	[ "$(stat -c %s d.msgpack)" -gt $((140 * 65536)) ]
	mkdir tmp
	sw-sort d.msgpack >mem.msgpack
	sw-sort --no-group -k reward d.msgpack >mem2.msgpack
	run -0 --separate-stderr bash -c 'ulimit -n 96; exec sw-sort -S 64K -T tmp d.msgpack >disk.msgpack'
	[ "$stderr" = "" ]
	cmp mem.msgpack disk.msgpack
	run -0 --separate-stderr bash -c 'ulimit -n 96; exec sw-sort --no-group -k reward -S 64K -T tmp d.msgpack >disk2.msgpack'
	[ "$stderr" = "" ]
	cmp mem2.msgpack disk2.msgpack
	[ -z "$(ls tmp)" ]
}

@test "--bucket: equal counts, whole groups, one file each with %d" {
	sw-datagen -n 200 -s 2 >d.msgpack
	run -0 sw-sort --bucket 3 -o 'b-%d.msgpack' d.msgpack
	[ "$(sw-cat -c b-0.msgpack)" -eq 72 ]
	[ "$(sw-cat -c b-1.msgpack)" -eq 64 ]
	[ "$(sw-cat -c b-2.msgpack)" -eq 64 ]
	for i in 0 1 2; do
		[ "$(sw-cat -f json b-$i.msgpack | jq -r .bucket | sort -u)" = "$i" ]
	done
	# no group in two buckets
	[ "$(cat b-0.msgpack b-1.msgpack b-2.msgpack | sw-cat -f json | jq -r '"\(.group) \(.bucket)"' | sort -u | wc -l)" -eq 25 ]
	# and cheaper buckets first
	a=$(sw-cat -f json b-0.msgpack | jq -s 'map(.cost) | max')
	b=$(sw-cat -f json b-2.msgpack | jq -s 'map(.cost) | min')
	awk -v a="$a" -v b="$b" 'BEGIN { exit !(a <= b * 8) }'
	run -2 --separate-stderr sw-sort -o 'x-%d' d.msgpack
	[ "${stderr_lines[0]}" = "sw-sort: a %d in the output name needs --bucket" ]
}

@test "bad input: a missing or mistyped key, a bad cost field, a broken stream" {
	printf '%s\n' '{"id":"a","reward":1}' '{"id":"b"}' >miss.jsonl
	run -1 --separate-stderr sw-sort -k reward miss.jsonl
	[ "$output" = "" ]
	[ "$stderr" = "sw-sort: miss.jsonl: record 2: no field 'reward' to sort by" ]
	printf '%s\n' '{"id":"a","reward":1}' '{"id":"b","reward":"high"}' >mixed.jsonl
	run -1 --separate-stderr sw-sort -k reward mixed.jsonl
	[ "$stderr" = "sw-sort: mixed.jsonl: record 2: field 'reward' is a str, where the first record's is a number" ]
	printf '%s\n' '{"id":"a","reward":{"$f64":"nan"}}' >nan.jsonl
	run -1 --separate-stderr sw-sort -k reward nan.jsonl
	[ "$stderr" = "sw-sort: nan.jsonl: record 1: field 'reward' is nan" ]
	printf '%s\n' '{"id":"a","prompt_tokens":[1]}' '{"id":"b","prompt_tokens":"1 2"}' >bad.jsonl
	run -1 --separate-stderr sw-sort bad.jsonl
	[ "$stderr" = "sw-sort: bad.jsonl: record 2: field 'prompt_tokens' is a str, not an array" ]
	printf '%s\n' '{"id":"a","group":3,"prompt_tokens":[1]}' >g.jsonl
	run -1 --separate-stderr sw-sort g.jsonl
	[ "$stderr" = "sw-sort: g.jsonl: record 1: field 'group' is not a str" ]
	sw-datagen -n 3 >d.msgpack
	printf '\x81\xa1' >>d.msgpack
	run -1 --separate-stderr sw-sort d.msgpack
	[[ $stderr == "sw-sort: d.msgpack: record 4 (byte "*"): "* ]]
	run -1 --separate-stderr sw-sort -T /no/such/dir -S 64K <(sw-datagen -n 300)
	[[ $stderr == "sw-sort: cannot create a temporary file in '/no/such/dir': No such file or directory" ]]
}

@test "-o may name an input, as with sort(1)" {
	sw-datagen -n 40 -s 4 >d.msgpack
	sw-sort d.msgpack >want.msgpack
	run -0 sw-sort -o d.msgpack d.msgpack
	cmp d.msgpack want.msgpack
}

@test "usage errors" {
	run -2 --separate-stderr sw-sort -S 1K
	[ "${stderr_lines[0]}" = "sw-sort: option '-S' wants a size of at least 64K (bytes, or with K, M or G), not '1K'" ]
	run -2 --separate-stderr sw-sort -S 12X
	[[ ${stderr_lines[0]} == "sw-sort: option '-S' wants a size"* ]]
	run -2 --separate-stderr sw-sort --stage dream
	[ "${stderr_lines[0]}" = "sw-sort: unknown stage 'dream' (generate or train)" ]
	run -2 --separate-stderr sw-sort --bucket 0
	[[ ${stderr_lines[0]} == "sw-sort: option '--bucket' wants a whole number from 1 to "* ]]
}

@test "on a terminal: JSON Lines by default, binary refused" {
	command -v script >/dev/null || skip "script(1) is not installed"
	sw-datagen -n 3 >d.msgpack
	run -0 script -qec "sw-sort --no-group -k id d.msgpack" /dev/null
	[[ ${lines[0]} == '{"id":"p0/0",'* ]]
	run -2 script -qec "sw-sort -z d.msgpack" /dev/null
	[[ $output == "sw-sort: refusing to write binary to a terminal"* ]]
}
