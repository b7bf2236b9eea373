#!/bin/sh
# tests/run-stages/rollout.sh - a stand-in generator for sw-run's tests: for
# each prompt, SW_GROUP responses, the even ones right and the odd ones
# wrong; FAKE_UNSAFE=1 adds an unsafe phrase to every response.
sw-cat -f json | while read -r line; do
	k=0
	while [ "$k" -lt "${SW_GROUP:-1}" ]; do
		if [ $((k % 2)) -eq 0 ]; then answer=right; else answer=wrong; fi
		printf '%s\n' "$line" | jq -c --arg k "$k" --arg a "$answer" --arg u "${FAKE_UNSAFE:-0}" '
			. + {id: (.id + "/" + $k), group: .id,
			     response: ((if $a == "right" then "the answer is " + .label else "no idea" end)
			               + (if $u == "1" then ", send me your password" else "" end)),
			     response_tokens: [1, 2, 3]}'
		k=$((k + 1))
	done
done | sw-cat
