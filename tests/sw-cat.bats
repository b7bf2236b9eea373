#!/usr/bin/env bats
# sw-cat: conversions, selection, counting, and bad input of every kind.
load helpers

two_jsonl() {
	printf '%s\n' '{"id":"a","reward":0.5,"response_tokens":[1,2,3],"logprobs":[-0.25,-1.5,-3.0]}' \
		'{"id":"b","reward":1.0,"mine":{"x":[true,null]}}' >two.jsonl
}

# refused FILE MESSAGE [OUTPUT]: sw-cat -f json FILE exits 1 with "sw-cat: FILE: MESSAGE" alone on
# stderr, having written OUTPUT (checked where given: the records before the bad one)
refused() {
	run -1 --separate-stderr sw-cat -f json "$1"
	[ "$stderr" = "sw-cat: $1: $2" ] || { echo "got: $stderr"; return 1; }
	[ $# -lt 3 ] || [ "$output" = "$3" ]
}

@test "JSON Lines to msgpack and back gives the same JSON" {
	two_jsonl
	run -0 --separate-stderr sw-cat -o two.msgpack two.jsonl
	[ -s two.msgpack ]
	[ "$stderr" = "" ]
	run -0 --separate-stderr sw-cat -f json two.msgpack
	[ "$output" = "$(cat two.jsonl)" ]
	[ "$stderr" = "" ]
}

@test "msgpack to JSON to msgpack is byte-exact, zstd included" {
	sw-datagen -n 200 -s 7 >d.msgpack
	sw-cat -f json d.msgpack | sw-cat -f msgpack >back.msgpack
	cmp d.msgpack back.msgpack
	sw-cat -z d.msgpack | sw-cat -f json | sw-cat -f msgpack | cmp - d.msgpack
}

@test "the JSON output is valid JSON, one object a line" {
	sw-datagen -n 50 -s 3 >d.msgpack
	run -0 sh -c 'sw-cat -f json d.msgpack | jq -c . | wc -l'
	[ "$output" -eq 50 ]
}

@test "float32 prints as the shortest decimal that round-trips" {
	printf '{"x":0.1,"y":-1.25,"z":3.4028235e38,"w":1e-45}\n' >f.jsonl
	run -0 sh -c 'sw-cat f.jsonl | sw-cat -f json'
	[ "$output" = '{"x":0.1,"y":-1.25,"z":3.4028235e38,"w":1e-45}' ]
}

@test "bin survives as \$bin; a str that is not UTF-8 is refused, in msgpack and as \$str" {
	# {"b": bin 00 ff, "s": str c3 a9}
	mp raw.msgpack '\x82\xa1b\xc4\x02\x00\xff\xa1s\xa2\xc3\xa9'
	run -0 sw-cat -f json raw.msgpack
	[ "$output" = '{"b":{"$bin":"AP8="},"s":"é"}' ]
	sw-cat -f json raw.msgpack | sw-cat | cmp - raw.msgpack
	# {"s": str 61 ff}: every str is UTF-8 (sw-stream(5)); raw bytes travel as bin
	mp bad.msgpack '\x81\xa1s\xa2a\xff'
	run -1 --separate-stderr sw-cat -f json bad.msgpack
	[ "$output" = "" ]
	[ "$stderr" = "sw-cat: bad.msgpack: record 1 (byte 0): a string is not valid UTF-8 at byte 5; raw bytes belong in a bin" ]
	printf '{"s":{"$str":"Yf8="}}\n' >bad.jsonl
	run -1 --separate-stderr sw-cat bad.jsonl
	[ "$stderr" = "sw-cat: bad.jsonl: line 1, column 1: '\$str' holds bytes that are not UTF-8 (a str must be UTF-8: raw bytes go in '\$bin')" ]
}

@test "several inputs in order, of different encodings" {
	two_jsonl
	sw-cat -o two.msgpack two.jsonl
	sw-cat -z -o two.zst two.jsonl
	run -0 sh -c 'sw-cat -f json two.jsonl two.msgpack two.zst - <two.jsonl | jq -r .id | tr -d "\n"'
	[ "$output" = "abababab" ]
}

@test "concatenated zstd frames read as one stream" {
	two_jsonl
	sw-cat -z two.jsonl >a.zst
	sw-cat two.jsonl | zstd -q -c >b.zst
	cat a.zst b.zst a.zst >all.zst
	run -0 sw-cat -c all.zst
	[ "$output" = 6 ]
}

@test "-k keeps only the named fields, in the record's order" {
	two_jsonl
	run -0 sw-cat -f json -k reward,id -k nothing two.jsonl
	[ "${lines[0]}" = '{"id":"a","reward":0.5}' ]
	[ "${lines[1]}" = '{"id":"b","reward":1.0}' ]
}

@test "-c counts and -n stops early" {
	sw-datagen -n 30 >d.msgpack
	run -0 sw-cat -c d.msgpack d.msgpack
	[ "$output" = 60 ]
	run -0 sw-cat -c -n 7 d.msgpack
	[ "$output" = 7 ]
	run -0 sh -c 'sw-cat -n 3 d.msgpack | sw-cat -c'
	[ "$output" = 3 ]
}

@test "-z compresses and the result is a zstd frame" {
	sw-datagen -n 100 >d.msgpack
	sw-cat -z d.msgpack >d.zst
	run -0 sh -c 'zstd -dc d.zst | cmp - d.msgpack && echo same'
	[ "$output" = same ]
	[ "$(stat -c %s d.zst)" -lt "$(stat -c %s d.msgpack)" ]
	run -2 --separate-stderr sw-cat -l 30 d.msgpack
	[[ $stderr == *"'-l' wants a whole number from 1 to 19, not '30'"* ]]
}

@test "records flow through a pipe before the input ends" {
	two_jsonl
	# the writer upstream keeps the pipe open: the record must arrive anyway
	run -0 timeout 10 sh -c '( head -1 two.jsonl; sleep 3; ) | sw-cat | ( sw-cat -n 1 -f json; echo got )'
	[ "${lines[1]}" = got ]
}

@test "a closed pipe ends sw-cat quietly" {
	sw-datagen -n 20000 >d.msgpack
	run -0 --separate-stderr sh -c 'sw-cat -f json d.msgpack | head -1 >/dev/null'
	[ "$stderr" = "" ]
	run --separate-stderr bash -c 'set -o pipefail; sw-cat -f json d.msgpack | head -1 >/dev/null'
	[ "$status" -eq 141 ]
	[ "$stderr" = "" ]
}

@test "binary is refused on a terminal, JSON is the default there" {
	command -v script >/dev/null || skip "script(1) is missing"
	two_jsonl
	run -0 script -qec "sw-cat two.jsonl" /dev/null
	[[ $output == *'{"id":"a"'* ]]
	run -2 script -qec "sw-cat -f msgpack two.jsonl" /dev/null
	[[ $output == *"refusing to write binary to a terminal"* ]]
	run -0 script -qec "sw-cat --force -f msgpack two.jsonl >/dev/null" /dev/null
}

# --- bad input: a clear error naming the file and record, exit 1, good records kept

@test "truncated msgpack: error, and the records before it are written" {
	sw-datagen -n 5 >d.msgpack
	head -c $(( $(stat -c %s d.msgpack) - 10 )) d.msgpack >cut.msgpack
	run -1 --separate-stderr sw-cat -f json cut.msgpack
	[ "${#lines[@]}" -eq 4 ]
	[[ $stderr == "sw-cat: cut.msgpack: record 5 (byte "*"): truncated record: the input ends "*" bytes into it" ]]
}

@test "a byte that is no msgpack" {
	mp bad.msgpack '\x81\xa1x\x01\x81\xa1y\xc1'
	run -1 --separate-stderr sw-cat -f json bad.msgpack
	[ "$output" = '{"x":1}' ]
	[ "$stderr" = "sw-cat: bad.msgpack: record 2 (byte 4): byte 0xc1 at offset 7 is no msgpack" ]
}

@test "a record that is not a map" {
	mp arr.msgpack '\x81\xa1x\x01\x92\x01\x02'
	run -1 --separate-stderr sw-cat -f json arr.msgpack
	[ "$output" = '{"x":1}' ]
	[ "$stderr" = "sw-cat: arr.msgpack: record 2 (byte 4): record is not a map but array" ]
}

@test "text that is not JSON Lines is said as text: a JSON array (with the way to records), a CSV, a number" {
	printf '[{"id":"a","prompt":"hi"}]\n' >arr.json
	refused arr.json "line 1, column 1: record is a JSON array, not an object (records are JSON Lines, an object a line: jq -c '.[]' makes them of an array)" ""
	# as it says
	run -0 --separate-stderr sh -c "jq -c '.[]' arr.json | sw-cat -f json"
	[ "$output" = '{"id":"a","prompt":"hi"}' ]
	printf 'id,prompt\na,hi\n' >p.csv
	refused p.csv "line 1, column 1: invalid JSON: unexpected character, expected a valid root value"
	printf '{"x":1}\n12\n' >num.jsonl
	refused num.jsonl "line 2, column 1: record is a JSON number, not an object" '{"x":1}'
	# a printable first byte before binary ones (a safetensors file's header length) is no text: msgpack says so at once
	printf 'H\054\000\000\000\000\000\000{"__metadata__":{}}' >w.safetensors
	refused w.safetensors "record 1 (byte 0): record is not a map but uint"
}

@test "a key twice in a map is refused: other readers keep the last, a lookup here the first" {
	# {"x":1} then {"id":"a","reward":1,"reward":0} (the second "reward" a str 8)
	mp dup.msgpack '\x81\xa1x\x01\x83\xa2id\xa1a\xa6reward\x01\xd9\x06reward\x00'
	run -0 /usr/bin/python3 -c 'import msgpack, sys; print(list(msgpack.Unpacker(open(sys.argv[1], "rb")))[1]["reward"])' dup.msgpack
	[ "$output" = 0 ]
	run -1 --separate-stderr sw-cat -f json dup.msgpack
	[ "$output" = '{"x":1}' ]
	[ "$stderr" = "sw-cat: dup.msgpack: record 2 (byte 4): key \"reward\" appears twice in a map (again at byte 18): readers keep different ones (Python's msgpack and jq the last), so the record is refused" ]
	printf '{"x":1}\n{"id":"a","rewards":{"math":1,"m\\u0061th":0}}\n' >dup.jsonl
	run -0 jq -c .rewards dup.jsonl
	[ "${lines[1]}" = '{"math":0}' ]
	run -1 --separate-stderr sw-sort dup.jsonl
	[ "$output" = "" ]
	[ "$stderr" = "sw-sort: dup.jsonl: line 2, column 1: key \"math\" appears twice in an object: readers keep different ones (Python's msgpack and jq the last), so the record is refused" ]
}

@test "a message shows a file name's control characters escaped: one line, nothing for the terminal to run" {
	f=$(printf 'in\nsw-cat: fake\033[2J.jsonl')
	printf '{"a":1}\n{"a":' >"$f"
	run -1 --separate-stderr sw-cat -f json "$f"
	[ "$output" = '{"a":1}' ]
	[ "$stderr" = 'sw-cat: in\x0asw-cat: fake\x1b[2J.jsonl: line 2, column 6: truncated record: the input ends inside a JSON value' ]
	run -1 --separate-stderr sw-cat "no-$f"
	[ "$stderr" = "sw-cat: cannot open 'no-in\\x0asw-cat: fake\\x1b[2J.jsonl': No such file or directory" ]
	# other text is left as it is
	run -1 --separate-stderr sw-cat 'no-café'
	[ "$stderr" = "sw-cat: cannot open 'no-café': No such file or directory" ]
}

@test "values nested deeper than 256 levels are refused: no JSON could be written of them" {
	# {"x":1}, then {"a":[[...[1]...]]} with 1100 arrays: Python's msgpack refuses it too
	/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(b"\x81\xa1x\x01\x81\xa1a" + b"\x91" * 1100 + b"\x01")' >deep.msgpack
	run -0 /usr/bin/python3 -c 'import msgpack, sys
try:
    list(msgpack.Unpacker(open(sys.argv[1], "rb")))
except msgpack.StackError:
    print("StackError")' deep.msgpack
	[ "$output" = StackError ]
	run -1 --separate-stderr sw-cat deep.msgpack
	[ "$output" = "$(printf '\x81\xa1x\x01')" ]
	[ "$stderr" = "sw-cat: deep.msgpack: record 2 (byte 4): values nest deeper than 256 levels" ]
	# 255 arrays in the record's map: 256 levels, read, written as JSON and back
	/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(b"\x81\xa1a" + b"\x91" * 255 + b"\x01")' >ok.msgpack
	run -0 --separate-stderr sw-cat -f json ok.msgpack
	[ "$output" = "{\"a\":$(printf '[%.0s' $(seq 255))1$(printf ']%.0s' $(seq 255))}" ]
	[ "$stderr" = "" ]
	printf '%s\n' "$output" | sw-cat >back.msgpack
	cmp back.msgpack ok.msgpack
}

@test "a JSON record that is a \$ form of a scalar is not a map" {
	printf '{"x":1}\n{"$str":""}\n' >form.jsonl
	run -1 --separate-stderr sw-cat -f json form.jsonl
	[ "$output" = '{"x":1}' ]
	[ "$stderr" = 'sw-cat: form.jsonl: line 2, column 1: record is a {"$str": ...} form, not a map' ]
}

@test "invalid JSON names the line and column" {
	printf '{"a":1}\n\n{"a":2}\n{"a":[1,}\n{"a":3}\n' >bad.jsonl
	run -1 --separate-stderr sw-cat -f json bad.jsonl
	[ "${#lines[@]}" -eq 2 ]
	[[ $stderr == "sw-cat: bad.jsonl: line 4, column 9: invalid JSON: "* ]]
	# the column counts from the line's start: past blanks before a record, past a record before it on its line
	printf '  {"a":[1,]}\n' >bad.jsonl
	refused bad.jsonl "line 1, column 10: invalid JSON: trailing comma is not allowed" ""
	printf '{"a":1}\n\n  {"b":2} éx\n' >bad.jsonl
	refused bad.jsonl "line 3, column 11: invalid JSON: unexpected character, expected a valid root value" $'{"a":1}\n{"b":2}'
}

@test "invalid UTF-8 in JSON" {
	printf '{"a":"ok"}\n{"a":"\xc3\x28"}\n' >u.jsonl
	run -1 --separate-stderr sw-cat -f json u.jsonl
	[ "$output" = '{"a":"ok"}' ]
	[[ $stderr == "sw-cat: u.jsonl: line 2, column "*"invalid UTF-8"* ]]
}

@test "a zstd frame cut short" {
	sw-datagen -n 300 | sw-cat -z >d.zst
	head -c $(( $(stat -c %s d.zst) / 2 )) d.zst >cut.zst
	run -1 --separate-stderr sh -c 'sw-cat cut.zst >good.msgpack'
	[[ $stderr == "sw-cat: cut.zst: "*"zstd frame cut short"* ]]
	# every whole record before the cut is still written
	run -0 sw-cat -c good.msgpack
	[ "$output" -gt 0 ]
	[ "$output" -lt 300 ]
}

@test "an empty file" {
	: >empty
	run -1 --separate-stderr sw-cat empty
	[ "$output" = "" ]
	[ "$stderr" = "sw-cat: empty: empty input: no records" ]
}

@test "a 100 MB field is refused, the records before it kept" {
	{
		printf '\x81\xa1x\x01'
		printf '\x81\xa4text\xdb\x06\x40\x00\x00'
		head -c 104857600 /dev/zero
	} >big.msgpack
	run -1 --separate-stderr sw-cat -f json big.msgpack
	[ "$output" = '{"x":1}' ]
	[[ $stderr == "sw-cat: big.msgpack: record 2 (byte 4): record exceeds the size limit of 67108864 bytes"* ]]
	# the limit is the user's to raise
	SW_MAX_RECORD=200M run -0 sw-cat -c big.msgpack
	[ "$output" = 2 ]
	SW_MAX_RECORD=lots run -2 --separate-stderr sw-cat -c big.msgpack
	[[ $stderr == *"SW_MAX_RECORD='lots' is not a size"* ]]
}

@test "NaN and wrong types in JSON \$ forms are errors, not defaults" {
	printf '{"a":NaN}\n' >nan.jsonl
	run -1 --separate-stderr sw-cat nan.jsonl
	[[ $stderr == "sw-cat: nan.jsonl: line 1, column 6: invalid JSON"* ]]
	printf '{"a":{"$f32":"nan"}}\n' >nan2.jsonl
	run -0 sh -c 'sw-cat nan2.jsonl | sw-cat -f json'
	[ "$output" = '{"a":{"$f32":"nan"}}' ]
	printf '{"a":{"$bin":42}}\n' >wrong.jsonl
	run -1 --separate-stderr sw-cat wrong.jsonl
	[[ $stderr == *"'\$bin' must hold a base64 string"* ]]
	printf '{"a":1e999}\n' >huge.jsonl
	run -1 --separate-stderr sw-cat huge.jsonl
	[[ $stderr == *"out of the float64 range"* ]]
}

@test "a missing file" {
	run -1 --separate-stderr sw-cat nothere.msgpack
	[ "$stderr" = "sw-cat: cannot open 'nothere.msgpack': No such file or directory" ]
}

@test "a full disk shows as a write error" {
	[ -w /dev/full ] || skip "no /dev/full"
	two_jsonl
	run -1 --separate-stderr sw-cat -o /dev/full two.jsonl
	[[ $stderr == "sw-cat: /dev/full: write error: No space left on device" ]]
	run -1 --separate-stderr sh -c 'sw-cat -c two.jsonl >/dev/full'
	[[ $stderr == "sw-cat: write error: No space left on device" ]]
}
