# Sourced by the comparison scripts (benchcmp.sh, scenariocmp.sh), from the
# repository's root.

# tree REV DIR: the files of REV (or of the working tree for "") in DIR.
tree() {
	mkdir -p "$2"
	if [ -z "$1" ]; then
		git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$2"
	else
		git archive "$1" | tar -x -C "$2"
	fi
}
