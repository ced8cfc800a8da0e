#!/usr/bin/env bash
# tests/cli/check_ops_listing.sh — `sinter ops` lists >= 35 ops as "name arity grad=yes|no"
set -euo pipefail
sinter="$1"
listing=$("$sinter" ops)
count=$(printf '%s\n' "$listing" | wc -l)
bad=$(printf '%s\n' "$listing" | grep -Ev '^[a-z_0-9]+ (n|[0-9]+) grad=(yes|no)$' || true)
[ -z "$bad" ] || { echo "malformed lines:"; echo "$bad"; exit 1; }
[ "$count" -ge 35 ] || { echo "only $count ops listed"; exit 1; }
for op in add matmul softmax layernorm cross_entropy gather concat; do
  grep -q "^$op .* grad=yes$" <<<"$listing" || { echo "$op missing or not differentiable"; exit 1; }
done
grep -q '^less 2 grad=no$' <<<"$listing" || { echo "comparisons must be grad=no"; exit 1; }
if "$sinter" no-such-command 2>/tmp/sinter_cli_err.$$; then echo "unknown command accepted"; exit 1; fi
grep -q "unknown command 'no-such-command'" /tmp/sinter_cli_err.$$ || { echo "no clear error"; exit 1; }
rm -f /tmp/sinter_cli_err.$$
echo "sinter ops: $count ops, format ok"
