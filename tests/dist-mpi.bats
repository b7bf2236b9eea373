#!/usr/bin/env bats
# The communicator of sw/dist.h across real ranks: tests/unit/test_dist.c
# run under mpirun (its one-rank half runs in the unit tests).
load helpers

@test "test_dist under mpirun -np 2: the collectives agree on every rank" {
	need_mpirun
	t=${SW_BIN%/bin}/tests/test_dist
	run -0 sw_mpirun -np 2 "$t"
	[ "$(grep -c '^1\.\.[0-9]' <<<"$output")" -eq 2 ]
	grep -q '^ok .* - rank 1 of 2$' <<<"$output"
	grep -q 'the same bits on every rank' <<<"$output"
	# a device's collective (NCCL's place): a rank that cannot load it stops every rank before any joins
	[ "$(grep -c '^ok .* - device sum: no rank made an id or joined after a failed open' <<<"$output")" -eq 2 ]
	[ "$(grep -c '^ok .* - device sum: the sums (2 1 4)$' <<<"$output")" -eq 2 ]
	run ! grep '^not ok' <<<"$output"
}

@test "test_dist under mpirun -np 3: sums in rank order, uneven shards (each rank, both chunk sizes)" {
	need_mpirun
	t=${SW_BIN%/bin}/tests/test_dist
	run -0 sw_mpirun -np 3 "$t"
	[ "$(grep -c '^1\.\.[0-9]' <<<"$output")" -eq 3 ]
	[ "$(grep -c '^ok .* - the sum is in rank order: 0$' <<<"$output")" -eq 6 ]
	run ! grep '^not ok' <<<"$output"
}

@test "without a launcher a program is one process and never starts MPI" {
	t=${SW_BIN%/bin}/tests/test_dist
	run -0 env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK -u SLURM_STEP_NUM_TASKS "$t"
	grep -q '^ok .* - open: one process$' <<<"$output"
	run ! grep '^not ok' <<<"$output"
}
