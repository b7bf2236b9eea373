#!/bin/sh
# bench/bench_netns.sh - two "hosts" on this machine: two network namespaces
# joined by a veth pair (10.77.N.1 and 10.77.N.2), MPI between them over TCP
# only, as between two machines.  mpirun runs in the first host's namespace;
# its rsh agent (plm_rsh_agent) starts Open MPI's daemon in the second one's
# with `ip netns exec`, as ssh would on another machine.
#
#   bench_netns.sh            the allreduce bandwidth (bench/allreduce_bench.c) between the two
#                             hosts, beside two ranks on one host over TCP and over shared memory
#   bench_netns.sh -- CMD...  make the hosts, run CMD with `mpirun2` on PATH (mpirun ARGS... across
#                             the two hosts, one rank each) and `mpirun-hosts` (the same, the hosts
#                             as its arguments say; their addresses in $SW_NETNS_HOSTS), remove the
#                             hosts; CMD's exit status
#
# Needs root and iproute2: where namespaces cannot be made, -- exits 77 saying why, and the
# benchmark says so in its output and exits 0 (make bench goes on).
# The namespaces and the veth pair are removed however it ends (trap).
# Environment: B (build directory, default build), SW_BENCH_MB (64), SW_BENCH_REPS (15).
set -eu
. "$(dirname "$0")/env.sh"
cannot() {
	if [ "${1:-}" = -- ]; then
		echo "bench_netns: $2" >&2
		exit 77
	fi
	echo "(not measured: $2)"
	exit 0
}
[ "$(id -u)" = 0 ] || cannot "${1:-}" "needs root (ip netns add)"
command -v ip >/dev/null || cannot "${1:-}" "needs iproute2 (ip)"
command -v mpirun >/dev/null || cannot "${1:-}" "needs Open MPI (mpirun)"

# names of our own: two runs at once do not meet (interface names have at most 15 bytes)
tag=$$
net=$((tag % 200 + 20))
nsA=swnsA$tag nsB=swnsB$tag vA=swvA$tag vB=swvB$tag
ipA=10.77.$net.1 ipB=10.77.$net.2
dir=$(bench_tmp netns)
cleanup() {
	ip netns del "$nsA" 2>/dev/null || true
	ip netns del "$nsB" 2>/dev/null || true
	ip link del "$vA" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$nsA" 2>"$dir/err" || cannot "${1:-}" "cannot make a network namespace: $(cat "$dir/err")"
ip netns add "$nsB"
ip link add "$vA" type veth peer name "$vB"
ip link set "$vA" netns "$nsA"
ip link set "$vB" netns "$nsB"
ip -n "$nsA" addr add "$ipA/24" dev "$vA"
ip -n "$nsB" addr add "$ipB/24" dev "$vB"
for n in "$nsA:$vA" "$nsB:$vB"; do
	ip -n "${n%%:*}" link set lo up
	ip -n "${n%%:*}" link set "${n#*:}" up
done

# the rsh agent: HOST COMMAND... runs COMMAND (a shell command line, as rsh takes it) on HOST
cat >"$dir/agent" <<EOF
#!/bin/sh
host=\$1
shift
case \$host in
$ipA) ns=$nsA ;;
$ipB) ns=$nsB ;;
*) echo "bench_netns agent: no host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
printf '%s slots=1\n%s slots=1\n' "$ipA" "$ipB" >"$dir/hosts"
cat >"$dir/mpirun-hosts" <<EOF
#!/bin/sh
# mpirun on the first host, reaching the second through the agent, TCP between them (no shared
# memory: they are two machines); the hosts as its arguments say (--hostfile, --host)
exec ip netns exec $nsA mpirun --mca plm_rsh_agent $dir/agent \\
	--mca btl tcp,self --mca btl_tcp_if_include 10.77.$net.0/24 --mca oob_tcp_if_include 10.77.$net.0/24 "\$@"
EOF
printf '#!/bin/sh\n# one rank on each host\nexec %s --hostfile %s "$@"\n' "$dir/mpirun-hosts" "$dir/hosts" >"$dir/mpirun2"
chmod +x "$dir/agent" "$dir/mpirun-hosts" "$dir/mpirun2"
# the two hosts' addresses, for a hostfile of one's own
export SW_NETNS_HOSTS="$ipA $ipB"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ "${1:-}" = -- ]; then
	shift
	status=0
	PATH="$dir:$PATH" "$@" || status=$?
	exit $status
fi

drv=$B/bench/allreduce_bench
[ -x "$drv" ] || { echo "bench_netns: $drv is missing (make B=$B $drv)" >&2; exit 1; }
mb=${SW_BENCH_MB:-64} reps=${SW_BENCH_REPS:-15}
one() { # LABEL MPIRUN...: one row
	local label=$1
	shift
	"$@" "$drv" "$mb" "$reps" | awk -v l="$label" '{
		# RANKS BYTES MEDIAN P10 P90 ALGBW BUSBW
		printf "| %s | %d | %.0f MB | %.1f ms | %.1f-%.1f ms | %.3f GB/s | %.3f GB/s |\n",
			l, $1, $2 / 1e6, $3 * 1e3, $4 * 1e3, $5 * 1e3, $6, $7 }'
}
echo "sw_comm_allreduce_sum_f32 of $mb MB between 2 ranks, median of $reps (p10-p90); load: $(uptime | sed 's/.*load/load/')"
echo
echo "| ranks on | ranks | vector | median | p10-p90 | algbw | busbw |"
echo "|---|---|---|---|---|---|---|"
one "two hosts (netns, veth, TCP)" "$dir/mpirun2" -np 2
one "one host, TCP (loopback)" mpirun -np 2 --oversubscribe --bind-to none --mca btl tcp,self \
	--mca btl_tcp_if_include lo --mca btl_vader_single_copy_mechanism none
one "one host, shared memory" mpirun -np 2 --oversubscribe --bind-to none --mca btl vader,self \
	--mca btl_vader_single_copy_mechanism none
