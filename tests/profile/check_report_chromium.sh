#!/usr/bin/env bash
# tests/profile/check_report_chromium.sh MLP SCREENSHOT — report.html of a real profile (the mlp
# recipe with --profile) rendered by headless Chromium: no console error or failed load, and a
# screenshot kept at SCREENSHOT (a test artifact to look at). A page with a planted console
# error is checked first, so a detector that sees nothing fails. Without chromium: exit 77 (skip).
set -uo pipefail
mlp=$1 screenshot=$2
browser=$(command -v chromium || command -v chromium-browser) || {
  echo "chromium is not installed (Debian: apt-get install chromium): skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# render PAGE PNG: Chromium's log of loading PAGE (console messages included), screenshot in PNG.
render() {
  timeout 120 "$browser" --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$dir/chrome" --enable-logging=stderr --v=0 --window-size=1200,2400 \
    --screenshot="$2" "file://$1" 2>&1
}
# The problems a log shows: console errors, uncaught exceptions, resources that failed to load.
problems() { grep -E 'CONSOLE.*(error|Error|Uncaught)|"console\.error|Failed to load|net::ERR_' <<<"$1"; }

printf '<!DOCTYPE html><html><body><p>x</p><script>console.error("planted error")</script></body></html>' \
  >"$dir/planted.html"
log=$(render "$dir/planted.html" "$dir/planted.png")
if ! problems "$log" >/dev/null; then
  echo "FAIL: the planted console error was not seen in Chromium's log:"; echo "$log"; exit 1
fi

SINTER_LOG=0 "$mlp" --steps 30 --batch-size 64 --hidden 64 --threads 2 --profile "$dir/profile" \
  >/dev/null 2>&1 || { echo "FAIL: mlp --profile"; exit 1; }
rm -f "$screenshot"
log=$(render "$dir/profile/report.html" "$screenshot")
if problems "$log"; then echo "FAIL: report.html logged the problems above"; exit 1; fi
[[ -s $screenshot ]] || { echo "FAIL: no screenshot written"; echo "$log"; exit 1; }
[[ $(head -c 8 "$screenshot" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
  { echo "FAIL: the screenshot is not a PNG"; exit 1; }
size=$(stat -c %s "$screenshot")
(( size > 20000 )) || { echo "FAIL: the screenshot is $size bytes: an empty page?"; exit 1; }
echo "report.html rendered without console errors; screenshot $screenshot ($size bytes)"
