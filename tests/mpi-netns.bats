#!/usr/bin/env bats
# Two hosts for real on this machine: two network namespaces joined by a veth
# pair, MPI over TCP between them (bench/bench_netns.sh makes them, and removes
# them however it ends).  What runs across the two hosts gives what one host
# gives.  Skipped where namespaces cannot be made (not root, no iproute2).
load helpers

M=$TOP/tests/fixtures/models/tiny-llama

# across CMD...: run CMD with mpirun2 (mpirun over the two hosts) on PATH; skip when there are no hosts
across() {
	need_mpirun
	# (under make check, LeakSanitizer would report what Open MPI keeps until exit)
	ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" run "$TOP/bench/bench_netns.sh" -- "$@"
	[ "$status" -ne 77 ] || skip "${lines[-1]}"
}

@test "two hosts: a rank in each network namespace, each with its own address, MPI between them over TCP" {
	across sh -c 'mpirun2 -np 2 sh -c "echo rank \$OMPI_COMM_WORLD_RANK \$(ip -o -4 addr show | grep -o \"10\.77\.[0-9]*\.[12]/\")"'
	[ "$status" -eq 0 ]
	[[ $(printf '%s\n' "${lines[@]}" | grep '^rank' | sort | tr '\n' ' ') =~ ^rank\ 0\ 10\.77\.[0-9]+\.1/\ rank\ 1\ 10\.77\.[0-9]+\.2/\ $ ]]
	# gone with the run: no namespace, no veth left behind
	run -0 ip netns list
	run ! grep -q "swnsA$" <<<"$output"
	run ! sh -c 'ip -o link | grep -q swv'
}

@test "sw-rollout across the two hosts writes the one-host stream, byte for byte" {
	for i in $(seq 1 7); do printf '{"id":"p%d","prompt":"prompt number %d"}\n' "$i" "$i"; done >in.jsonl
	sw-rollout -m "$M" -n 3 --max-new-tokens 12 in.jsonl >one.msgpack
	across sh -c "mpirun2 -np 2 sw-rollout -m '$M' -n 3 --max-new-tokens 12 '$PWD/in.jsonl' >'$PWD/two.msgpack'"
	[ "$status" -eq 0 ]
	cmp one.msgpack two.msgpack
	# a bad prompt on the second host: its message, every rank exits 1
	{ head -5 in.jsonl; echo '{"id":"bad","prompt":5}'; tail -2 in.jsonl; } >bad.jsonl
	across sh -c "mpirun2 -np 2 sw-rollout -m '$M' -n 2 --max-new-tokens 4 '$PWD/bad.jsonl' >/dev/null"
	[ "$status" -ne 0 ]
	[[ $output == *"sw-rollout: rank 1: $PWD/bad.jsonl: record 6: field 'prompt' is a uint, not a string"* ]]
}

@test "sw-train across the two hosts: the single-host result, bit for bit (and one process's to within rounding)" {
	grpo_set | sw-balance -n 2 -f json >bal.jsonl
	sw_mpirun -np 2 sw-train -m "$M" -o host --lr 1e-3 --metrics host.jsonl bal.jsonl >host.out
	across sh -c "mpirun2 -np 2 sw-train -m '$M' -o '$PWD/hosts' --lr 1e-3 --metrics '$PWD/hosts.jsonl' '$PWD/bal.jsonl' >'$PWD/hosts.out'"
	[ "$status" -eq 0 ]
	# the gradients summed over TCP between the namespaces in rank order: the very bits of one host
	cmp host/model.safetensors hosts/model.safetensors
	cmp host/optimizer.bin hosts/optimizer.bin
	cmp host.out hosts.out
	[ "$(jq .ranks hosts.jsonl)" = 2 ]
	[ "$(jq .loss hosts.jsonl)" = "$(jq .loss host.jsonl)" ]
	# and the loss of one process on the whole stream, to within rounding (sw-train(1))
	sw-train -m "$M" -o one --lr 1e-3 --metrics one.jsonl bal.jsonl >/dev/null
	awk -v a="$(jq .loss one.jsonl)" -v b="$(jq .loss hosts.jsonl)" 'BEGIN { d = a - b; exit !(d * d <= 1e-12 * a * a) }'
}

@test "README: the hostfile block runs as written on the two hosts (node1, node2: the namespaces)" {
	readme_block_k "Data parallel: MPI and Slurm" 2 >hosts.sh
	grep -q '^printf .node1 slots=2' hosts.sh
	grep -q '^mpirun --hostfile hosts -np 4 ' hosts.sh
	# what the block before it made: the model and the one-host stream
	sw-model init --size tiny m >/dev/null
	ln -s "$TOP/examples" examples
	sw-rollout -m m -n 4 --max-new-tokens 16 examples/prompts.jsonl -o dp.msgpack
	# the machines' names are the namespaces' addresses; mpirun reaches them as bench_netns.sh does
	across bash -c 'set -- $SW_NETNS_HOSTS
		sed -e "s/node1/$1/; s/node2/$2/; s/^mpirun /mpirun-hosts /" hosts.sh >run.sh
		bash -eo pipefail run.sh'
	[ "$status" -eq 0 ]
	[ -s hosts.msgpack ]
	cmp dp.msgpack hosts.msgpack
}
