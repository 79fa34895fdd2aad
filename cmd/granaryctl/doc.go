// Granaryctl inspects and operates a Granary cluster through the admin HTTP
// API of one of its silos, which answers for the whole cluster.
//
// Usage:
//
//	granaryctl [--admin ADDR] [--timeout DURATION] [-o table|json]
//	           [--tls-ca FILE] [--tls-cert FILE --tls-key FILE] [--token-file FILE] COMMAND [ARG]
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
//	--tls-ca FILE       the PEM CA bundle the admin server's certificate
//	                    must chain to ($GRANARY_TLS_CA). With it, or with a
//	                    client certificate, a host:port --admin is spoken
//	                    to over https, and an http:// URL is refused.
//	--tls-cert FILE     a client certificate to present, with its key
//	--tls-key FILE      ($GRANARY_TLS_CERT, $GRANARY_TLS_KEY): an admin's,
//	                    when the silos admit admin client certificates, or
//	                    the one mutual TLS asks for.
//	--token-file FILE   the admin token to send as "Authorization: Bearer"
//	                    ($GRANARY_TOKEN_FILE): a file holding the token
//	                    alone, or a silo's token file of "TOKEN PRINCIPAL"
//	                    lines, whose first token is used. Blank lines and
//	                    lines starting with # are skipped. Sending a token
//	                    over plain HTTP draws a warning.
//
// Each flag wins over its environment variable.
//
// Commands:
//
//	status               the cluster in brief: the silo asked, silos by
//	                     status, total activations, calls and errors per
//	                     second, the silos shedding load, the streams (when
//	                     the silos run them), and the members that did not
//	                     answer. json: the ClusterReport.
//	silos                one row per silo: name, member, status (with
//	                     ",shedding" while the silo sheds load), activations,
//	                     queued turns, uptime, gateway and admin addresses;
//	                     members that did not answer follow as "unreachable".
//	                     json: the silos' reports, with their overload
//	                     counters.
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
//	streams list [--prefix P] [--parked] [--limit N]
//	                     one row per stream active in the cluster, those
//	                     that most need an operator first (parked
//	                     subscriptions, then events waiting): the silo it
//	                     is active on, its event type, subscriptions, parked
//	                     ones and events waiting. --prefix keeps the streams
//	                     whose PROVIDER/NAMESPACE/KEY starts with P, --parked
//	                     those with a parked subscription; --limit (default
//	                     100) bounds the list, with a warning on standard
//	                     error when streams are left out. json: the
//	                     StreamsReport.
//	streams lag [--all] [--prefix P] [--parked] [--limit N]
//	                     one row per subscription of those streams that is
//	                     parked or has events waiting (--all: every one):
//	                     stream, subscription ID, grain, handler, events
//	                     waiting, status (parked since when, delivering or
//	                     caught-up) and why it was parked. json: the
//	                     StreamsReport.
//	streams unpark STREAM SUBSCRIPTION
//	                     resumes delivery to the parked subscription of
//	                     STREAM (PROVIDER/NAMESPACE/KEY) whose ID is
//	                     SUBSCRIPTION, wherever the stream is active. A
//	                     memory stream's subscriber gets the events
//	                     published from then on, a durable stream's resumes
//	                     from its cursor. json: the Unparked reply.
//	certs --out DIR [--silo NAME[,SAN...]]... [--client NAME]... [--ip IP]... [--localhost]
//	                     writes a CA (ca.crt, ca.key; reused when DIR has
//	                     both) and, signed by it, NAME.crt and NAME.key for
//	                     each silo (server and client use, valid for NAME,
//	                     its other names and IPs, every --ip, and with
//	                     --localhost localhost, 127.0.0.1 and ::1) and each
//	                     client (client use only; NAME is its principal).
//	                     Keys are mode 0600. Needs no admin server and no
//	                     openssl. --ca-name names a new CA; --validity sets
//	                     the certificates' lifetime (default a year).
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
//	   argument, a bad --admin, --timeout or --output, a TLS or token file
//	   that cannot be read
//
// A silo with an admin token file answers 401 without the token; one
// with no admin credentials configured refuses deactivate, drain and
// streams unpark with 403, naming the settings that turn them on.
//
// Examples:
//
//	granaryctl --admin silo-0.granary:8080 status
//	GRANARY_ADMIN=localhost:8081 granaryctl -o json silos
//	granaryctl lookup bank.Account/alice
//	granaryctl drain silo-2
//	granaryctl streams lag --parked
//	granaryctl streams unpark default/orders/eu 5b1e0f4c-8d2a-4f61-9a7e-3c0b1d2e4f60
//	granaryctl certs --out ./certs --silo silo-0,silo-0.granary --client ops --localhost
//	granaryctl --admin silo-0.granary:8080 --tls-ca certs/ca.crt --token-file ~/.granary-token drain silo-2
package main
