#!/usr/bin/env bash
# Finds a headless-capable Chromium for the dashboard's browser test
# (silo/admin), installing Debian's chromium package when none is found,
# on Debian or Ubuntu.
#
#   scripts/chromium.sh     install Chromium if missing and print the path
#                           of its executable on the last line
#
# Then run the tests with that path, for example:
#
#   export GRANARY_CHROMIUM=$(scripts/chromium.sh | tail -n1)
#   GRANARY_TEST_CHROMIUM_REQUIRED=1 go test -race ./silo/admin/
#
# Progress goes to stderr, the path alone to stdout. Needs root, or sudo,
# only when Chromium must be installed.
set -euo pipefail

# The names Chromium's executable goes by, the Debian package's first.
CANDIDATES=(chromium chromium-browser google-chrome-stable google-chrome)

log() { echo "chromium: $*" >&2; }
die() { log "$*"; exit 1; }

# as_root runs a command as root: directly when we are root, else by sudo.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# find_browser prints the path of the first candidate on PATH, if any.
# A GRANARY_CHROMIUM that names an executable wins.
find_browser() {
	if [ -n "${GRANARY_CHROMIUM:-}" ] && [ -x "$GRANARY_CHROMIUM" ]; then
		echo "$GRANARY_CHROMIUM"
		return 0
	fi
	local name
	for name in "${CANDIDATES[@]}"; do
		if command -v "$name" >/dev/null 2>&1; then
			command -v "$name"
			return 0
		fi
	done
	return 1
}

install_browser() {
	log "installing Chromium (apt-get)"
	as_root apt-get update >&2
	# fonts-liberation gives the page's sans-serif text real glyphs in
	# screenshots; chromium alone may bring only fallback fonts.
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		chromium fonts-liberation >&2
}

# check_runs makes sure the browser starts: a package with missing shared
# libraries would otherwise fail only inside the test.
check_runs() {
	local version
	if ! version=$("$1" --headless --no-sandbox --disable-gpu --version 2>&1); then
		die "$1 does not start: $version"
	fi
	# Debian's wrapper script may complain on stderr before the version
	# line; the last line is the browser's.
	log "${version##*$'\n'}"
}

main() {
	if [ $# -ne 0 ]; then
		echo "usage: $0" >&2
		exit 2
	fi
	local path
	if ! path=$(find_browser); then
		install_browser
		path=$(find_browser) || die "chromium installed, but no executable named ${CANDIDATES[*]} is on PATH"
	fi
	check_runs "$path"
	log "ready; export GRANARY_CHROMIUM='$path'"
	echo "$path"
}

main "$@"
