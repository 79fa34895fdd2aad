// Granaryctl inspects and operates a Granary cluster through the admin HTTP
// API of one of its silos, which answers for the whole cluster.
//
// Usage:
//
//	granaryctl [--admin ADDR] [--timeout DURATION] [-o table|json] COMMAND [ARG]
//
// Global flags:
//
//	--admin ADDR        the admin address of any silo: host:port or an
//	                    http(s) URL, optionally with a path prefix. Default
//	                    localhost:8080, or $GRANARY_ADMIN when set (the
//	                    flag wins over the variable).
//	--timeout DURATION  how long to wait for the answer, as a Go duration
//	                    ("10s", the default; "1m").
//	-o, --output FORMAT table (the default) prints for people; json prints
//	                    the admin API's document, indented.
//
// Commands:
//
//	status               the cluster in brief: the silo asked, silos by
//	                     status, total activations, calls and errors per
//	                     second, and the members that did not answer.
//	                     json: the ClusterReport.
//	silos                one row per silo: name, member, status, activations,
//	                     queued turns, uptime, gateway and admin addresses;
//	                     members that did not answer follow as "unreachable".
//	                     json: the silos' reports.
//	grains               one row per grain type, summed over the cluster:
//	                     activations, calls and errors since start, and their
//	                     rates per second. json: the type reports.
//	lookup TYPE/KEY      the silo the grain is active on, or "not active".
//	                     json: the Location.
//	deactivate TYPE/KEY  deactivates the grain on whichever silo holds it,
//	                     after its running requests. json: the Deactivation.
//	drain SILO           asks SILO (its name or member ID) to hand its grains
//	                     over and leave the cluster, and prints which silo
//	                     accepted. json: the DrainReply.
//	help [COMMAND]       help for granaryctl or a command.
//
// A grain is named TYPE/KEY, e.g. bank.Account/alice: the type is everything
// before the first '/', and neither part may be empty.
//
// When some members do not answer, silos and grains still print what the
// others said, and warn on standard error that the totals leave them out.
//
// Exit status:
//
//	0  the command did what was asked
//	1  the admin API answered with an error, or could not be reached; the
//	   message on standard error names the admin address
//	2  a usage error: an unknown command or flag, a missing or malformed
//	   argument, a bad --admin, --timeout or --output
//
// Examples:
//
//	granaryctl --admin silo-0.granary:8080 status
//	GRANARY_ADMIN=localhost:8081 granaryctl -o json silos
//	granaryctl lookup bank.Account/alice
//	granaryctl drain silo-2
package main
