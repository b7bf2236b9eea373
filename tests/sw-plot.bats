#!/usr/bin/env bats
# sw-plot: the SVG parses as XML and holds the panels and points the
# metrics call for; PNG through a converter; bad metrics named by record.
load helpers

# A run directory: 12 iterations, evaluations at 0, 5 and 10.
make_run() {
	mkdir -p "$1"
	awk 'BEGIN {
		print "{\"iter\":0,\"eval\":true,\"accuracy\":0.2,\"violation_rate\":0.18}"
		for (i = 1; i <= 12; i++) {
			printf "{\"iter\":%d,\"reward_mean\":%.3f,\"rewards\":{\"math\":%.3f,\"blocklist\":%.3f},", i, i / 20, i / 15, -0.1 + i / 200
			printf "\"accuracy\":%.3f,\"violation_rate\":%.3f,\"kl\":%.4f,\"entropy\":%.3f,", 0.2 + i / 30, 0.2 - i / 70, i / 1000, 1.5 - i / 50
			printf "\"response_len_mean\":%.1f,\"tokens_per_s\":%d,\"time_s\":{\"rollout\":1.5,\"train\":%.2f}}\n", 40 + i, 5000 + 10 * i, 2 + i / 10
			if (i % 5 == 0) printf "{\"iter\":%d,\"eval\":true,\"accuracy\":%.3f,\"violation_rate\":%.3f}\n", i, 0.2 + i / 35, 0.18 - i / 80
		}
	}' >"$1/metrics.jsonl"
}

# xmllint --xpath of the SVG in $1 (namespaces ignored through local-name()).
xp() {
	xmllint --xpath "$2" "$1"
}

@test "the SVG parses and has a panel a metric, in order, with the points" {
	command -v xmllint >/dev/null || skip "xmllint (libxml2-utils) is not installed"
	make_run run
	run -0 --separate-stderr sw-plot run
	[ "$stderr" = "" ]
	printf '%s\n' "$output" >p.svg
	xmllint --noout p.svg
	run -0 sh -c "xmllint --xpath '//*[@class=\"panel\"]/@id' p.svg | tr -s ' \n' ' '"
	[ "$(echo $output)" = 'id="panel-reward_mean" id="panel-rewards" id="panel-accuracy" id="panel-violation_rate" id="panel-kl" id="panel-entropy" id="panel-response_len_mean" id="panel-tokens_per_s" id="panel-time_s"' ]
	# 12 training points on the accuracy panel, 3 evaluation points
	[ "$(xp p.svg 'count(//*[@id="panel-accuracy"]/*[@class="train-point"])')" = 12 ]
	[ "$(xp p.svg 'count(//*[@id="panel-accuracy"]/*[@class="eval-point"])')" = 3 ]
	[ "$(xp p.svg 'count(//*[@id="panel-violation_rate"]/*[@class="eval-point"])')" = 3 ]
	[ "$(xp p.svg 'count(//*[@id="panel-kl"]/*[@class="eval-point"])')" = 0 ]
	# one line a verifier on the rewards panel, named in its key
	[ "$(xp p.svg 'count(//*[@id="panel-rewards"]/*[local-name()="polyline"])')" = 2 ]
	[ "$(xp p.svg 'string(//*[@id="panel-rewards"]/*[@class="key"][2])')" = blocklist ]
	[ "$(xp p.svg 'string(//*[@id="panel-rewards"]/*[local-name()="polyline"][2]/@data-name)')" = blocklist ]
	# the time by stage: a line a stage
	[ "$(xp p.svg 'count(//*[@id="panel-time_s"]/*[local-name()="polyline"])')" = 2 ]
	[ "$(xp p.svg 'string(//*[@id="panel-time_s"]/*[@class="key"][2])')" = train ]
	# the first eval point's tooltip is its iteration and value
	[ "$(xp p.svg 'string(//*[@id="panel-accuracy"]/*[@class="eval-point"][1]/*)')" = "iter 0: 0.2" ]
	# percent ticks on a share, from 0%
	[ "$(xp p.svg 'string(//*[@id="panel-accuracy"]/*[@class="ytick"][1])')" = "0%" ]
	[ "$(xp p.svg 'string(//*[local-name()="title"][1])')" = run ]
}

@test "the points lie where their values say" {
	command -v xmllint >/dev/null || skip "xmllint (libxml2-utils) is not installed"
	make_run run
	sw-plot -o p.svg run
	# accuracy rises: each training point is higher on the page (smaller y) than the one before
	run -0 sh -c "xmllint --xpath '//*[@id=\"panel-accuracy\"]/*[@class=\"train-point\"]/@cy' p.svg | tr -s ' \n' '\n' | sed -n 's/cy=\"\(.*\)\"/\1/p'"
	[ "${#lines[@]}" -eq 12 ]
	for ((i = 1; i < 12; i++)); do
		awk -v a="${lines[i-1]}" -v b="${lines[i]}" 'BEGIN { exit !(b < a) }'
	done
}

@test "a missing field is an absent panel; several runs overlay" {
	command -v xmllint >/dev/null || skip "xmllint (libxml2-utils) is not installed"
	make_run a
	mkdir b
	printf '{"iter":1,"kl":0.1}\n{"iter":2,"kl":0.2,"entropy":null}\n' >b/metrics.jsonl
	run -0 sw-plot -o only.svg b
	[ "$(xp only.svg 'count(//*[local-name()="g"][@class="panel"])')" = 1 ]
	[ "$(xp only.svg 'string(//*[local-name()="g"][@class="panel"]/@id)')" = panel-kl ]
	run -0 sw-plot -t 'a & b' -o both.svg a b/metrics.jsonl
	xmllint --noout both.svg
	[ "$(xp both.svg 'count(//*[@id="panel-kl"]/*[local-name()="polyline"])')" = 2 ]
	[ "$(xp both.svg 'count(//*[@id="panel-accuracy"]/*[local-name()="polyline"])')" = 2 ]
	[ "$(xp both.svg 'string(//*[@class="legend"]/*[@class="run"][2])')" = b ]
	[ "$(xp both.svg 'string(//*[@class="title"])')" = "a & b" ]
}

@test "msgpack input, and a NaN counted, not drawn" {
	command -v xmllint >/dev/null || skip "xmllint (libxml2-utils) is not installed"
	make_run run
	sw-cat run/metrics.jsonl >m.msgpack
	# {"iter": 13, "kl": NaN} as msgpack float64
	mp nan.msgpack '\x82\xa4iter\x0d\xa2kl\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00'
	cat m.msgpack nan.msgpack | sw-plot -o n.svg
	[ "$(xp n.svg 'string(//*[@id="panel-kl"]/*[@class="nonfinite"])')" = "1 non-finite value not drawn" ]
	[ "$(xp n.svg 'count(//*[@id="panel-kl"]/*[@class="train-point"])')" = 12 ]
}

@test "PNG through a converter" {
	command -v rsvg-convert >/dev/null || skip "rsvg-convert (librsvg2-bin) is not installed"
	make_run run
	mkdir tmp
	run -0 --separate-stderr env TMPDIR="$PWD/tmp" sw-plot -o p.png run
	[ "$stderr" = "" ]
	[ "$(head -c 8 p.png | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ]
	# 940 pixels wide, as the SVG says (PNG IHDR width, big-endian)
	[ "$(od -An -tu1 -j16 -N4 p.png | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')" = 940 ]
	# the SVG on its way is removed
	[ -z "$(ls tmp)" ]
	# with no converter on PATH, a clear error and no file
	mkdir bin && ln -s "$(command -v sw-plot)" bin/sw-plot
	run -1 --separate-stderr env PATH="$PWD/bin" sw-plot -o q.png run
	[ "$stderr" = "sw-plot: cannot write 'q.png': no SVG to PNG converter found (rsvg-convert from librsvg2-bin, or ImageMagick); write .svg instead" ]
	[ ! -e q.png ]
}

@test "bad metrics are named by file and record" {
	mkdir r
	printf '{"iter":1,"kl":0.1}\n{"iter":2,"kl":"high"}\n' >r/metrics.jsonl
	run -1 --separate-stderr sw-plot r
	[ "$output" = "" ]
	[ "$stderr" = "sw-plot: r/metrics.jsonl: record 2: field 'kl' is a string, not a number" ]
	printf '{"iter":1,"kl":0.1}\n{"kl":0.2}\n' >m.jsonl
	run -1 --separate-stderr sw-plot -o x.svg m.jsonl
	[ "$stderr" = "sw-plot: m.jsonl: record 2: no field 'iter'" ]
	[ ! -e x.svg ]
	printf '{"iter":1,"kl":0.1}\n{"iter":2,"kl":}\n' >j.jsonl
	run -1 --separate-stderr sw-plot j.jsonl
	[ "$stderr" = "sw-plot: j.jsonl: line 2, column 16: invalid JSON: unexpected character, expected a valid JSON value" ]
	printf '{"iter":1,"kl":0.1}\n{"iter":2,"kl":\n' >t.jsonl
	run -1 --separate-stderr sw-plot t.jsonl
	[[ $stderr == "sw-plot: t.jsonl: line 3, column 1: truncated record"* ]]
	printf '{"iter":1,"eval":"yes"}\n' >e.jsonl
	run -1 --separate-stderr sw-plot e.jsonl
	[ "$stderr" = "sw-plot: e.jsonl: record 1: field 'eval' is a string, not true or false" ]
	printf '{"iter":1,"rewards":{"math":"x"}}\n' >w.jsonl
	run -1 --separate-stderr sw-plot w.jsonl
	[ "$stderr" = "sw-plot: w.jsonl: record 1: field 'rewards': 'math' is a string, not a number" ]
	printf '{"iter":1,"time_s":3.5}\n' >ts.jsonl
	run -1 --separate-stderr sw-plot ts.jsonl
	[ "$stderr" = "sw-plot: ts.jsonl: record 1: field 'time_s' is a number, not a map of stage to seconds" ]
	printf '{"iter":1,"loss":3}\n' >n.jsonl
	run -1 --separate-stderr sw-plot n.jsonl
	[[ $stderr == "sw-plot: n.jsonl: no metrics to plot "* ]]
	: >empty.jsonl
	run -1 --separate-stderr sw-plot empty.jsonl
	[ "$stderr" = "sw-plot: empty.jsonl: no records" ]
	run -1 --separate-stderr sw-plot nope
	[ "$stderr" = "sw-plot: cannot open 'nope': No such file or directory" ]
	mkdir norun
	run -1 --separate-stderr sw-plot norun
	[ "$stderr" = "sw-plot: cannot open 'norun/metrics.jsonl': No such file or directory" ]
}

@test "usage errors" {
	run -2 --separate-stderr sw-plot -o x.pdf r
	[ "${stderr_lines[0]}" = "sw-plot: the output 'x.pdf' is neither .svg nor .png" ]
	run -2 --separate-stderr sw-plot -o
	[ "${stderr_lines[0]}" = "sw-plot: option '-o' needs an argument" ]
}
