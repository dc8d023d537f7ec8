//! The EXAMPLES and EXIT STATUS sections of each command's help (clap `after_help`),
//! and through clap the man page and the completions.
//!
//! Each EXIT STATUS line starts with its code (or codes, `a/b/c`) after two spaces: the
//! README, `tests/all/exit_codes.rs` and the code agree on these lists, and the test reads
//! them from `--help` and triggers every code listed against the built binary.

/// `aegis --help`: every code any command uses, and the environment it reads.
pub const TOP: &str = "\
EXAMPLES:
  aegis keygen --out ~/.config/aegis/signing.key
  aegis run --component tool.wasm --id echo --input hello
  aegis --profile durable-file run --signing-key KEY --component tool.wasm --id echo
  aegis verify --key KEY_ID aegis-audit.aarl
  aegis rotate --audit aegis-audit.aarl --signing-key KEY --next-key NEW_KEY
  aegis recheck --policy stricter.yaml --key KEY_ID aegis-audit.aarl
  aegis pins diff pins.jsonl -- ./server
  aegis approvals approve apr-… --approver-key ~/.config/aegis/approver.key
  aegis demo

EXIT STATUS:
  0    success (verify: Verified)
  1    a usage error (verify: Tampered)
  2    a file could not be read or written (pins: or the server started or listed)
  3    verify: Indeterminate
  4    a profile, plugin, key or sink was refused (pins accept: an ambiguous listing)
  5    the record is busy: another process is writing it
  6    recheck: the new policy decides some recorded calls otherwise
  7    recheck: nothing decided changes, but some calls are undecidable
  8    recheck: the record is Tampered (nothing replayed)
  9    pins diff: the server's tools differ from the pins file, or one is held
  10   run: refused by policy
  11   run: rate limited
  12   run: parked for approval and filed (not run), or --approval not decided yet
  13   run: refused by the capability station
  14   run: the tool trapped or exited non-zero
  15   run: a ceiling (memory, wall time, output) stopped the tool
  16   run: the host could not start the tool
  17   run, wrap, gateway: the record could not be written
  18   gateway: the transport could not be bound or failed
  19   approvals approve/deny: the request was already decided (or its decision used);
       run --approval: the approval was used already
  20   approvals approve/deny: the request expired before it was decided; run
       --approval: it expired undecided
  125  wrap, pins, confine: the program could not be confined as required (not started)
  127  wrap, pins, confine: the confined program could not be executed
  129/130/143  stopped by SIGHUP/SIGINT/SIGTERM (run: after recording the outcome)
Each command's --help lists the codes it uses. wrap exits with its server's status,
confine with its command's.

ENVIRONMENT:
  NO_COLOR            set and not empty: no colour (as --color never)
  AEGIS_PROFILE_PATH  directories searched first for a profile given by name
  AEGIS_PLUGIN_PATH   directories searched first for a plugin given by name
  XDG_CACHE_HOME      the compilation cache is under $XDG_CACHE_HOME/aegis/wasmtime";

pub const KEYGEN: &str = "\
EXAMPLES:
  aegis keygen --out ~/.config/aegis/signing.key
  aegis keygen --out ./signing.key --force

EXIT STATUS:
  0  written
  1  a usage error; the file exists (without --force) or is not a regular file
  2  a directory, the key or its public half could not be written";

pub const ROTATE: &str = "\
EXAMPLES:
  aegis keygen --out ~/.config/aegis/next.key
  aegis rotate --audit record.aarl --signing-key ~/.config/aegis/signing.key \\
      --next-key ~/.config/aegis/next.key
  aegis run --audit record.aarl --signing-key ~/.config/aegis/next.key \\
      --component echo.wasm --id echo --input hi
  aegis verify --key OLD_KEY_ID record.aarl

Prints `key_handoff from OLD_KEY_ID to NEW_KEY_ID`. The session written is: an open line
under --signing-key, a key_handoff line it signs naming --next-key, and a close line
--next-key signs. `aegis verify` lists the hand-off (key_handoff), each later session
that continues it (key_continues), and with --key pinned to the old key only, the new
key as trusted_through_handoff. A session that changes key without a hand-off verifies
as before but is listed as key_unannounced. Keep the old key until no verifier needs
it to sign again; remove it from trust stores only if it may be compromised (its holder
can hand the record to any key).

EXIT STATUS:
  0    rotated
  1    a usage error
  2    a key file could not be read
  4    a key or the sink was refused (mode, not a seed file, published, the same key twice)
  5    the record is busy (--no-wait; without it rotate waits its turn)
  17   the hand-off or close line could not be written
  129/130/143  a signal ended the wait for a busy record (nothing written)";

pub const KEY_SHOW: &str = "\
EXAMPLES:
  aegis key show ~/.config/aegis/signing.key

EXIT STATUS:
  0  printed
  1  a usage error
  2  the file could not be read (or the output written)
  4  the file is not a seed file, or group or others can access it";

pub const RECHECK: &str = "\
EXAMPLES:
  aegis recheck --policy stricter.yaml aegis-audit.aarl
  aegis --profile cedar-example recheck --key KEY_ID aegis-audit.aarl
  aegis recheck --policy policy.yaml --json aegis-audit.aarl
  cat aegis-audit.aarl | aegis recheck --policy policy.yaml -

Replays each recorded call's policy decision and prints the calls decided otherwise,
grouped as newly refused, allowed, parked or rate-limited, then the undecidable ones,
then a summary line. The record holds no call times, so a rate limit's verdict is not
replayed as a fact: a call a rate rule governs is undecidable unless the record says
the same policy set decided it. Arguments are replayed as the record holds them: each
call's path-like ones (its tool's binding), or all of them when it ran with
--record-arguments; a rule over any other argument leaves the call undecidable
(\"arguments not recorded\"), never decided as if the argument were absent.

EXIT STATUS:
  0  every call decided, and none differently
  1  a usage error
  2  the record, the trust store or an approver key file could not be read (or the
     report written)
  4  the profile or the policy could not be loaded
  6  at least one call is decided differently
  7  none decided differently, but some calls are undecidable
  8  the record is Tampered: nothing was replayed";

pub const RUN: &str = "\
EXAMPLES:
  aegis run --component echo.wasm --id echo --input hello
  echo hello | aegis run --component echo.wasm --id echo
  aegis run --component read-file.wasm --id read --allow-read /srv/notes -- /srv/notes/a.md
  aegis run --policy policy.yaml --audit record.aarl --signing-key KEY \\
      --component echo.wasm --id echo --input hi
  aegis run --json --component echo.wasm --id echo --input hi

--signing-key, --audit and --role may come from the profile's [operator] table; a
flag given replaces it, and -v says where each came from.

Rate limits count per process: one run makes one call, so a policy's rate_limit never
stops it; for a limit across calls, send them through one `aegis wrap` or `aegis gateway`
session.

A call a rule parks (pending_approval) is not run: run files it in the approvals queue
(--approvals DIR, else the profile's dir, else its PostgreSQL store's queue, else
~/.local/state/aegis/approvals), prints its
approval id and exits 12. Once a person approves it (aegis approvals approve ID
--approver-key KEY), the same command with --approval ID runs it, once: same tool,
same arguments, before the approval expires (--approval-timeout, default 10m).
Input that is one JSON object is the call's arguments, which policy rules over
arguments read; any other input leaves them unknown, and such rules then refuse.

EXIT STATUS:
  0    success
  1    a usage error
  2    the input, the component or a root could not be read
  4    the profile, a plugin, the key or the sink was refused
  5    the record is busy (--no-wait; without it run waits its turn)
  10   refused by policy (--approval: a person denied it)
  11   rate limited (see above: not in one run)
  12   parked for approval and filed, not run (--approval: not decided yet)
  13   refused by the capability station
  14   the tool trapped or exited non-zero
  15   a ceiling (memory, wall time, output) stopped it
  16   the host could not start it (--approval: not the call approved, used up)
  17   the record could not be written (output withheld)
  19   --approval: the approval was used already
  20   --approval: the park expired before anyone decided it
  129/130/143  stopped by SIGHUP/SIGINT/SIGTERM (outcome and close line written)";

pub const LOG: &str = "\
EXAMPLES:
  aegis log --key KEY_ID aegis-audit.aarl
  aegis log --tool read_file --verdict denied aegis-audit.aarl
  aegis log --since 2026-12-04T00:00:00.000000Z --json aegis-audit.aarl
  aegis log --follow --key KEY_ID aegis-audit.aarl
  journal-reader | aegis log --follow -

Each session starts with a line saying when and where it opened and under which key:
# session N opened TIME on HOSTNAME by FRONT (run, wrap -- the server's argv, gateway
MANIFEST), key KEY (with --json, {\"session\":{...}} holding the open line's host and
front as recorded). Then, each call: time, session, tool, verdict (ok, denied,
rate_limited, parked, no_grant, failed, ceiling, refused, no_outcome, tool_change),
station, duration, call id, the key
that signed the outcome (key, first 16 hex digits), what the call tried (tried: the
path-like arguments its tool's binding names, as sent, canonical JSON), reason. A
record written before lines carried times, or calls whose tool had no binding, show -.
--json gives the full key_id and tried.

--follow lists what the record holds under its verdict, then keeps reading as it grows
(looking again every 200 ms), with aegis verify's rules applied line by line. A call is
listed once its outcome line has been read and its signature and chain verified, so
calls appear in the order they finished; a call still running is not listed until its
outcome comes (or, as no_outcome, once its session closes or a new one opens). A line
not yet ended by a newline is waited for. The follow stops:
  - at a Tampered line, with aegis verify's verdict;
  - when the file shrinks, or its name leads to another file or to none (a record
    only grows, so either is reported as Tampered);
  - on SIGINT or SIGTERM, with the verdict of the lines read so far;
  - with -, when standard input ends, with the verdict of all of it.
--json gives one object a call as it is listed and a last object: why it stopped
(stopped: signal, end, tampered, gone), a message, and the verify report.

EXIT STATUS:
  0    the record is Verified; with --follow, also stopped by SIGINT or SIGTERM
  1    Tampered (nothing listed), or a usage error; with --follow, a Tampered line
       (calls before it stay listed), or a file that shrank or was replaced
  2    the record could not be read, or the listing not written
  3    Indeterminate (what it holds is listed)";

pub const CONSOLE: &str = "\
EXAMPLES:
  aegis console aegis-audit.aarl
  aegis console --key KEY_ID --http 127.0.0.1:9000 /var/log/aegis/sessions/
  aegis --profile fleet console
  aegis console --approver-key ~/.config/aegis/me.key --approvals /srv/aegis/approvals audit.aarl
  aegis console --token-file ~/.config/aegis/console.token aegis-audit.aarl

Prints the address to open on stderr: http://ADDR/#token=TOKEN. The token rides in the
address's fragment, which the browser never sends anywhere; the page sends it to the
API as a bearer token. Without --token-file a fresh token is made for each run.

The page follows the record (or every file beneath the directory, new ones included;
or, with --profile and no path, where the profile records: its file, or its store of
many sessions such as PostgreSQL) as it grows: each line is verified before it is shown, and each file is shown under
its verdict (--key and --trust-store pin it, as for aegis verify). A file found
Tampered while its first read is in progress shows no calls; one found Tampered later
is marked at once. A call opens to its evidence: its raw lines, what they say, and the
aegis verify command that checks them offline. With --approvals, --profile or
--approver-key the queue of parked calls is shown; with --approver-key the page can
approve or deny one, the decision signed with that key. Every text the record holds is
shown as text, never as markup. Loopback only.

EXIT STATUS:
  0    stopped by SIGINT or SIGTERM
  1    a usage error
  2    the record, a key or the token file could not be read, or the token file is
       readable by group or others
  4    the approver key or the approvals queue was refused
  18   the address could not be served";

/// What `wrap` and `gateway` both say about parked calls and `--approve-via`.
macro_rules! approve_via {
    () => {
        "\
A call a rule parks waits for a decision in the approvals queue (aegis approvals
approve). With --approve-via client, the client's user is also asked through MCP
elicitation (form mode) when the client declared it can be; the first decision wins.
A client may answer without asking anyone: the record says `via: client`, which
`aegis verify --approver-key` does not take for a person's signature (Indeterminate).
"
    };
}

pub const WRAP: &str = concat!(
    "\
EXAMPLES:
  aegis wrap -- python3 server.py
  aegis wrap --policy policy.yaml --audit record.aarl --signing-key KEY -- npx server
  aegis wrap --write-pins pins.jsonl -- ./server
  aegis wrap --pins pins.jsonl --write-pins pins.jsonl -- ./server
  aegis --profile linux-confined wrap --allow-write ~/project -- ./server ~/project
  aegis --profile ./fs.toml wrap -- npx -y @modelcontextprotocol/server-filesystem ~/p

A profile's [operator] table can hold --signing-key, --audit, --role, --pins,
--write-pins, --pins-record-only and the --allow-* grants (spec/PROFILES.md); a flag
given replaces that key (a list flag the whole list), and -v says where each came from.
Policy rules name tools by the name the server lists them under. A rule with limits
(ceilings) is refused at start: a relayed server cannot be held to them. While another
process writes the record, wrap waits and starts no server until it holds the record.
A tool that changes during a session is held in the pins file --write-pins writes:
later sessions refuse it until `aegis pins diff` has shown the change and
`aegis pins accept` has taken it.
",
    approve_via!(),
    "
EXIT STATUS:
  N    the server's exit status, or 128+N when signal N ended it (137 after SIGKILL)
  1    a usage error
  2    the server could not be started or the pins file read
  4    the profile, a plugin, the key, the sink or a policy rule's limits were refused
  5    the record is busy (--no-wait; without it wrap waits its turn)
  17   an intent, an outcome or the close line could not be written
  125  the profile confines native programs and the server could not be confined as
       required (it was not started)
  127  the confined server could not be executed
A server exiting with one of these codes itself looks the same."
);

pub const CONFINE: &str = "\
EXAMPLES:
  aegis confine --allow-read ~/notes -- python3 summarize.py ~/notes
  aegis confine --allow-write /tmp/out --report - -- ./tool
  aegis confine --allow-net api.example.com:443 -- node client.js
  aegis confine --allow-exec ~/.pyenv -- python3 tool.py
  aegis --profile linux-confined confine --best-effort -- ./tool

The backend is the profile's [sandbox] confinement, or confine-landlock when the profile
names none. The grants may come from the profile's [operator] allow_read, allow_write,
allow_exec and allow_net; any --allow-* flag replaces that list.
Landlock's network rules are ports: --allow-net opens the port on every host.
--allow-exec PATH lets the program run what is beneath PATH (npx's ~/.npm/_npx, uv's
caches, ~/.pyenv for a shim); read is implied, and write over the same directory warns.

EXIT STATUS:
  N    the command's own status, or 128+N when signal N ended it (159, SIGSYS, is how
       the seccomp filter kills a foreign-architecture or x32 system call)
  1    a usage error
  4    the profile was refused
  125  the command could not be confined as required (it was not started)
  127  the command could not be found or executed";

pub const GATEWAY: &str = concat!(
    "\
EXAMPLES:
  aegis gateway --tools tools.toml
  aegis gateway --tools tools.toml --http 127.0.0.1:8765 --token-file token.txt
  aegis gateway --tools tools.toml --policy policy.yaml --audit record.aarl --signing-key KEY

--signing-key, --audit and --role may come from the profile's [operator] table; a
flag given replaces it, and -v says where each came from.

While another process writes the record, gateway waits and serves nothing until it
holds the record.
",
    approve_via!(),
    "
EXIT STATUS:
  0    served, and the record closed
  1    a usage error
  2    the manifest, a component, a root or the token file could not be read or was refused
  4    the profile, a plugin, the key or the sink was refused
  5    the record is busy (--no-wait; without it gateway waits its turn)
  17   an intent, an outcome or the close line could not be written
  18   the address could not be bound, the transport failed or the sandbox not built
  130/143  SIGINT/SIGTERM ended the wait for a busy record (while serving, they stop it: 0)"
);

pub const DEMO: &str = "\
EXAMPLES:
  aegis demo
  aegis --color never demo | less

EXIT STATUS:
  0  every call and every verdict came out as promised
  1  a usage error, or something differed (a bug)
  2  the demo's files could not be written
  130/143  SIGINT/SIGTERM stopped it (its temporary directory and key removed)";

pub const PLUGINS_LIST: &str = "\
EXAMPLES:
  aegis plugins list
  aegis plugins list --path ./target/release
  aegis plugins list --json

The NAME column is what a profile's `plugin =` takes.

EXIT STATUS:
  0  listed (a refused library is listed with the reason)
  1  a usage error
  2  a --path directory does not exist or cannot be read (the rest is listed)";

pub const PROFILES_LIST: &str = "\
EXAMPLES:
  aegis profiles list

The NAME column is what --profile takes.

EXIT STATUS:
  0  listed (a refused profile is listed with the reason)
  1  a usage error";

pub const PROFILES_SHOW: &str = "\
EXAMPLES:
  aegis profiles show durable-file
  aegis --profile ./profiles/mine.toml profiles show
  aegis profiles show --json default

The operator rows are the profile's [operator] settings, each with its line; a flag
given to a command replaces that setting for the run.

EXIT STATUS:
  0  shown, and every station's plugin accepted its config
  1  a usage error
  4  the profile was refused, or a plugin (or its config) was";

pub const EXPORT: &str = "\
EXAMPLES:
  aegis --profile durable-file export --out record.aarl
  aegis --profile ./mine.toml export --out record.aarl --force
  aegis --profile ./fleet.toml export --out records/ --host web-1 --since 2026-12-01
  aegis verify records/

EXIT STATUS:
  0  written
  1  a usage error, or the output exists (without --force) or is not a regular file
     (a directory, for a store of many sessions)
  2  the sink holds no record (none written yet, or a volatile sink, which keeps
     nothing past its process), or the sink or the output could not be read or written
  4  the profile, its audit plugin or the sink's config was refused
  5  the sink is busy: another process is writing the record (try again)";

pub const STORE: &str = "\
EXAMPLES:
  aegis --profile ./fleet.toml store init --admin-connection-file /etc/aegis/pg-admin.conn";

pub const STORE_INIT: &str = "\
Runs as the administrator (a role that may create tables in the profile's database, not
the profile's writer): makes the lines table, its append-only triggers and the rate-limit
table, and grants the writer INSERT and SELECT on the lines and nothing more. The retention
the profile declares is what the trigger enforces.

EXAMPLES:
  aegis --profile ./fleet.toml store init --admin-connection-file /etc/aegis/pg-admin.conn
  aegis --profile ./fleet.toml store init --admin-connection 'host=/run/postgresql user=postgres dbname=aegis'

EXIT STATUS:
  0  the store is ready, and the writer was checked to be able to add lines only
  1  a usage error (no administrator connection)
  4  the profile, its audit plugin, the store or the writer was refused (the sink keeps
     one chain and has no store to prepare; the server unreachable; the administrator
     and the writer are one role)";

pub const COMPLETIONS: &str = "\
EXAMPLES:
  aegis completions bash > ~/.local/share/bash-completion/completions/aegis
  aegis completions zsh > ~/.zfunc/_aegis
  aegis completions fish > ~/.config/fish/completions/aegis.fish

EXIT STATUS:
  0  written
  1  a usage error (an unknown shell)
  2  the output could not be written";

pub const MAN: &str = "\
EXAMPLES:
  aegis man > aegis.1 && man ./aegis.1
  aegis man | gzip > /usr/local/share/man/man1/aegis.1.gz

EXIT STATUS:
  0  written
  1  a usage error
  2  the output could not be written";

pub const KEY: &str = "\
EXAMPLES:
  aegis key show ~/.config/aegis/signing.key

EXIT STATUS:
  1  a usage error (no such subcommand); `aegis key show --help` lists its codes";

pub const PLUGINS: &str = "\
EXAMPLES:
  aegis plugins list
  aegis plugins list --path ./target/release --json

EXIT STATUS:
  1  a usage error (no such subcommand); `aegis plugins list --help` lists its codes";

pub const PROFILES: &str = "\
EXAMPLES:
  aegis profiles list
  aegis profiles show durable-file

EXIT STATUS:
  1  a usage error (no such subcommand); each subcommand's --help lists its codes";

pub const PINS: &str = "\
EXAMPLES:
  aegis pins diff pins.jsonl -- ./server
  aegis pins accept pins.jsonl --tool read -- ./server

EXIT STATUS:
  1  a usage error (no such subcommand); each subcommand's --help lists its codes";

pub const PINS_DIFF: &str = "\
EXAMPLES:
  aegis pins diff pins.jsonl -- python3 server.py
  aegis pins diff --json pins.jsonl -- npx -y @modelcontextprotocol/server-everything
  aegis --profile linux-confined pins diff pins.jsonl --allow-read ~/notes -- ./server

Reads version 1 and 2 pins files; a version 1 file holds digests only, so a changed
field shows the pinned digest, not the pinned text. Every value is the server's text,
shown escaped. --json prints one object: {\"differ\",\"pins_version\",\"tools\":[{\"change\",
\"fields\":[{\"field\",\"pinned\",\"current\"}],\"held\",\"name\",\"what\"}]}.

EXIT STATUS:
  0    the server lists exactly what the file pins, and nothing is held
  1    a usage error, or the pins file lies where the confined server may write
  2    the pins file could not be read, or the server started or listed (a step took
       longer than --timeout-ms, a page was ambiguous, more than 64 pages)
  4    the profile was refused
  9    a tool changed, was added or removed, is listed twice or ambiguously, or is held
  125  the profile confines native programs and the server could not be confined
  127  the confined server could not be executed
  129/130/143  SIGHUP/SIGINT/SIGTERM stopped it (forwarded to the server, which is ended)";

pub const PINS_ACCEPT: &str = "\
EXAMPLES:
  aegis pins accept pins.jsonl --expect SHA256 -- python3 server.py
  aegis pins accept pins.jsonl --tool read --tool write -- ./server

--expect takes the listing digest pins diff printed: the file is written only if the
server lists exactly what was reviewed (a server can show two runs different tools).

Without --tool every tool the server lists now is pinned, and every held mark goes.
With --tool only those tools take their current definition (or leave the file, when the
server no longer lists them) and lose their held mark; the rest stay as pinned. A
missing file is created. The file is version 2 (definitions stored), unless it was
version 1 and keeps a pin whose definition was never seen again.

EXIT STATUS:
  0    written
  1    a usage error (a --tool neither pinned nor listed), or the pins file lies where
       the confined server may write
  2    the pins file could not be read or written, or the server started or listed
  4    the profile was refused, the listing is not the --expect one, or it names a
       tool twice or a pinned field by another spelling (nothing written)
  125  the profile confines native programs and the server could not be confined
  127  the confined server could not be executed
  129/130/143  SIGHUP/SIGINT/SIGTERM stopped it (nothing written; the server is ended)";

pub const APPROVALS: &str = "\
EXAMPLES:
  aegis approvals list
  aegis approvals show apr-0123456789abcdef0123456789abcdef
  aegis approvals approve apr-0123456789abcdef0123456789abcdef --approver-key ~/.config/aegis/approver.key

The queue is a private directory (0700): --approvals DIR; else, with --profile, the
profile's [operator.approvals] dir, or the queue its audit store keeps when that is a
database every host writes (PostgreSQL: aegis --profile fleet approvals list); else
$XDG_STATE_HOME/aegis/approvals, else ~/.local/state/aegis/approvals.

EXIT STATUS:
  1  a usage error (no such subcommand); each subcommand's --help lists its codes";

pub const APPROVALS_LIST: &str = "\
EXAMPLES:
  aegis approvals list
  aegis approvals list --json --approvals /srv/aegis/approvals

A state is pending, expired, approved or denied (decided, not yet taken up by the
waiting host) or used. Text a request holds is shown escaped. --json prints one object
per request: {\"request\":{...the request file...},\"state\",\"decision\":{...}} (decision
once decided).

EXIT STATUS:
  0  listed (nothing on stdout for an empty queue)
  1  a usage error
  2  the queue could not be read or made
  4  the queue directory or a file in it was refused (a link, another user's, open to
     group or others, malformed, more than 10 000 entries)";

pub const APPROVALS_SHOW: &str = "\
EXAMPLES:
  aegis approvals show apr-0123456789abcdef0123456789abcdef
  aegis approvals show --json apr-0123456789abcdef0123456789abcdef

Shows exactly what approving authorises: the tool, the call's arguments (canonical JSON)
and the digest the approval binds, the argument axes the binding derived, the files it
may read and write, the network destinations, and until when the approval may be used;
then who parked it (front end, host, process, record), the rule and its reason, and the
state (with the decision, once there is one). Text a request holds is shown escaped.

EXIT STATUS:
  0  shown
  1  a usage error (an id not of the form apr- and 32 lowercase hex digits)
  2  no such request, or the queue could not be read
  4  the queue directory or the request was refused";

pub const APPROVALS_APPROVE: &str = "\
EXAMPLES:
  aegis approvals approve apr-0123456789abcdef0123456789abcdef --approver-key ~/.config/aegis/approver.key
  aegis approvals approve apr-0123456789abcdef0123456789abcdef --expires-in 5m --approver-key ~/.config/aegis/approver.key

Signs (approval id, verdict, scope) with the key and places it as the request's one
decision; the host waiting on the call is woken and runs it once, within that scope.
The scope is the one the park stated (`aegis approvals show`); --expires-in narrows it
to end sooner (for a park taken up later, by `aegis run --approval`). The tool, the
arguments and the authority cannot be changed by an approval: a call needing less is a
different call, parked anew. The record's decision line carries your key id and
signature.

EXIT STATUS:
  0   approved
  1   a usage error (an id not of the form apr- and 32 lowercase hex digits; an
      --expires-in that ends after the park's own expiry)
  2   no such request, the key or the queue could not be read, or the decision written
  4   the key (not a seed file, or group or others can access it), the queue directory
      or the request was refused
  19  already decided (the first decision stands) or its decision already used
  20  the request expired before it was decided";

pub const APPROVALS_DENY: &str = "\
EXAMPLES:
  aegis approvals deny apr-0123456789abcdef0123456789abcdef --reason 'not on production' --approver-key ~/.config/aegis/approver.key

Signs (approval id, denied, reason) with the key and places it as the request's one
decision; the host waiting on the call answers the client with the reason.

EXIT STATUS:
  0   denied
  1   a usage error (an id not of the form apr- and 32 lowercase hex digits; no
      --reason, or an empty one)
  2   no such request, the key or the queue could not be read, or the decision written
  4   the key (not a seed file, or group or others can access it), the queue directory
      or the request was refused
  19  already decided (the first decision stands) or its decision already used
  20  the request expired before it was decided";
