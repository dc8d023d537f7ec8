//! The console's feed: record files followed as they grow, each line verified before it
//! is shown, turned into events a page reads in order.
//!
//! One thread follows every file (a record, the files beneath a directory of session
//! files, looked at again each second for new ones, or a store's sessions). On Linux it
//! sleeps on an inotify watch of each file, so a write wakes it and only that file is
//! read; otherwise it looks at every file each poll interval. What it learns goes into
//! one append-only list of events; each page's stream sends the list from the start,
//! then what is added, so no page misses or reorders an event however late it
//! connects. The approvals queue is polled on a thread of its own and kept as one
//! snapshot (state, not history), sent to each page when it changes.
//!
//! A file's backlog (what it held when first read) is published once it is read to its
//! end, under its verdict: a file found Tampered before then publishes no calls, as
//! `aegis log` lists none of one. Later lines are published as each one verifies; a
//! file found Tampered later (a contradicting line, or cut shorter than what was read)
//! keeps the calls it published, and the page marks them under the file's new verdict
//! at once. A file removed or replaced under its name keeps its verdict (what was read
//! was its own) and a new file there is followed as one of its own.

use aegis_approvals::Queue;
use aegis_calls::{Assembler, Entry, Judged, Opened};
use aegis_files::{Found, Growing, Grown, WalkBound};
use aegis_record::json::{Object, SafeInt, Value};
use aegis_record::verify::{Options, Position, Report, Trust, TrustAnchor, Verdict};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::wake::{Wake, Woken};

/// What the console follows.
#[derive(Clone)]
pub enum Source {
    /// One record file.
    File(PathBuf),
    /// A directory of session files (every file beneath it, as `aegis verify DIR`
    /// walks it), looked at again each second for new ones.
    Directory(PathBuf),
    /// A store that keeps one chain per session (the PostgreSQL audit sink), listed
    /// again each second for new sessions and new lines.
    Store(Arc<dyn SessionStore>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(p) => f.debug_tuple("File").field(p).finish(),
            Source::Directory(p) => f.debug_tuple("Directory").field(p).finish(),
            Source::Store(s) => f.debug_tuple("Store").field(&s.location()).finish(),
        }
    }
}

/// A store of many sessions as the console reads it: what it holds, and each
/// session's lines by index. The CLI implements it over the profile's audit sink.
pub trait SessionStore: Send + Sync {
    /// Where it is, for the page (never a password).
    fn location(&self) -> String;
    /// Every session it holds, oldest first.
    ///
    /// # Errors
    /// Why the store could not be listed, in one line.
    fn sessions(&self) -> Result<Vec<StoredSession>, String>;
    /// Up to `max` lines of session `id` from its line index `start`, each byte-exact
    /// without its newline; fewer at its end.
    ///
    /// # Errors
    /// Why the session could not be read, in one line.
    fn read(&self, id: &str, start: u64, max: u32) -> Result<Vec<Vec<u8>>, String>;
    /// The commands that check session `id` offline (an export, then `aegis verify`).
    fn verify_command(&self, id: &str) -> String;
}

/// One session a store holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSession {
    /// The store's name for it.
    pub id: String,
    /// How many lines it holds.
    pub lines: u64,
}

/// How many lines of a stored session are read at once.
const STORE_PAGE: u32 = 1024;

/// The most of one file the console reads: 256 MiB. A file past it is no longer
/// followed (the page says so); `aegis log` and `aegis verify` read it whole.
pub const MAX_FILE: u64 = 256 << 20;

/// The most files (or stored sessions) read at once, each holding a descriptor (or
/// its place in the store). A file that stops being read (removed, Tampered, past
/// [`MAX_FILE`]) frees its place; one past the cap waits for a place, and the page says
/// so.
pub const MAX_FILES: usize = 512;

/// How a directory is walked: as deep as `aegis verify` walks one, and refused past
/// far more entries than [`MAX_FILES`] (so a listing that never ends is refused, not
/// read in part).
const WALK: WalkBound = WalkBound {
    entries: 1 << 16,
    depth: 32,
};

/// How long the thread waits when nothing grew, unless a watched file changes first
/// (on Linux a write wakes it at once; a store's sessions are looked at this often).
const POLL: Duration = Duration::from_millis(200);

/// How often the directory and the approvals queue are looked at again.
const RESCAN: Duration = Duration::from_secs(1);

/// How much of one file is read at once.
const CHUNK: usize = 1 << 20;

/// The raw lines one call's evidence is read from: its session's open line, its
/// intent, the park and decision a resumed call ran under, and its outcome (or the
/// tool change).
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// The file, as the console was given it.
    pub file: String,
    /// Its lines, each with what it is (`open`, `intent`, `parked`, `decision`,
    /// `outcome`, `tool_change`), in the record's order.
    pub lines: Vec<(&'static str, Arc<[u8]>)>,
    /// The call's row, as the feed sent it.
    pub row: Object,
    /// The command that checks the call's record offline.
    pub verify: Arc<str>,
}

/// What the feed has learnt, shared by the thread that learns it and the streams that
/// send it.
pub struct Feed {
    state: Mutex<State>,
    changed: tokio::sync::watch::Sender<usize>,
}

#[derive(Default)]
struct State {
    /// Every event, as JSON text, in the order it happened.
    events: Vec<Arc<str>>,
    /// Every call's evidence, by the number its event carries.
    calls: Vec<Arc<Evidence>>,
    /// The latest approvals listing, and how many listings there have been.
    approvals: Option<Arc<str>>,
    approvals_version: u64,
}

impl Feed {
    fn new() -> Arc<Feed> {
        Arc::new(Feed {
            state: Mutex::new(State::default()),
            changed: tokio::sync::watch::channel(0).0,
        })
    }

    /// At most `max` events from `from` on.
    pub fn since(&self, from: usize, max: usize) -> Vec<Arc<str>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let end = state.events.len().min(from.saturating_add(max));
        state.events.get(from..end).unwrap_or_default().to_vec()
    }

    /// The approvals queue as last listed (an `approvals` event), and how many times
    /// it has changed.
    pub fn approvals(&self) -> (Option<Arc<str>>, u64) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (state.approvals.clone(), state.approvals_version)
    }

    /// Replaces the approvals listing: it is state, not history, so only the latest is
    /// kept and sent.
    fn set_approvals(&self, listing: &Object) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.approvals = Some(text(listing));
        state.approvals_version += 1;
        let all = state.events.len();
        drop(state);
        self.changed.send_replace(all);
    }

    /// A receiver told each time events are added.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<usize> {
        self.changed.subscribe()
    }

    /// Call `n`'s evidence.
    pub fn call(&self, n: usize) -> Option<Arc<Evidence>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.calls.get(n).cloned()
    }

    /// Adds events (and the evidence of the calls among them, numbered in order).
    fn publish(&self, batch: Vec<Published>) {
        if batch.is_empty() {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for published in batch {
            match published {
                Published::Event(event) => state.events.push(text(&event)),
                Published::Call(mut event, evidence) => {
                    let n = state.calls.len();
                    event.insert("call", SafeInt::new(n as u64).unwrap_or_default());
                    state.events.push(text(&event));
                    state.calls.push(Arc::new(evidence));
                }
            }
        }
        let all = state.events.len();
        drop(state);
        self.changed.send_replace(all);
    }
}

fn text(o: &Object) -> Arc<str> {
    Arc::from(String::from_utf8_lossy(&o.to_canonical()).as_ref())
}

/// An event on its way to the list.
enum Published {
    Event(Object),
    /// A call's event (its number added as it is listed) and its evidence.
    Call(Object, Evidence),
}

/// Starts the thread that follows `source`, and one that polls `approvals` when given
/// (the page is told whether it `decides` them, and a slow queue never holds up the
/// record), until `stop`; what they learn goes to the feed returned.
///
/// # Errors
/// A thread could not be started.
pub fn start(
    source: Source,
    trust: Option<Vec<TrustAnchor>>,
    approvals: Option<Queue>,
    decides: bool,
    stop: CancellationToken,
) -> std::io::Result<Arc<Feed>> {
    let feed = Feed::new();
    let fed = feed.clone();
    let stopped = stop.clone();
    std::thread::Builder::new()
        .name("aegis-console-feed".into())
        .spawn(move || {
            Follow {
                source,
                options: Options {
                    trust,
                    approvers: None,
                    threads: 1,
                },
                feed: fed,
                wake: Wake::new(),
                files: Vec::new(),
                seen: BTreeSet::new(),
                refused_said: BTreeSet::new(),
                stored: HashMap::new(),
                dir_watched: false,
                dir_wd: None,
            }
            .run(&stopped);
        })?;
    if let Some(queue) = approvals {
        let fed = feed.clone();
        std::thread::Builder::new()
            .name("aegis-console-approvals".into())
            .spawn(move || poll_approvals(&queue, decides, &fed, &stop))?;
    }
    Ok(feed)
}

/// Lists the queue each second until `stop`, telling the feed when the listing
/// changes.
fn poll_approvals(queue: &Queue, decides: bool, feed: &Feed, stop: &CancellationToken) {
    let mut said: Option<Object> = None;
    while !stop.is_cancelled() {
        let mut o = Object::new();
        o.insert("kind", "approvals");
        o.insert("queue", queue.location());
        o.insert("decides", decides);
        match queue.list() {
            Ok(listed) => o.insert(
                "requests",
                Value::Array(
                    listed
                        .iter()
                        .map(|l| Value::Object(l.to_object()))
                        .collect(),
                ),
            ),
            Err(e) => o.insert("error", e.to_string()),
        };
        if said.as_ref() != Some(&o) {
            feed.set_approvals(&o);
            said = Some(o);
        }
        std::thread::sleep(RESCAN);
    }
}

struct Follow {
    source: Source,
    options: Options,
    feed: Arc<Feed>,
    /// What the thread sleeps on between looks.
    wake: Wake,
    files: Vec<Tail>,
    /// Every path followed now or before (a name removed or replaced is forgotten, so
    /// a new file there is followed anew).
    seen: BTreeSet<PathBuf>,
    /// Paths beneath a directory already said to be refused.
    refused_said: BTreeSet<PathBuf>,
    /// A store's sessions followed, by id: their index in `files`.
    stored: HashMap<String, usize>,
    /// The followed directory is watched for new names, by this watch.
    dir_watched: bool,
    dir_wd: Option<i32>,
}

impl Follow {
    fn run(mut self, stop: &CancellationToken) {
        let mut rescanned: Option<Instant> = None;
        let mut woken = Woken::All;
        while !stop.is_cancelled() {
            let named = matches!((&woken, self.dir_wd), (Woken::Watches(fired), Some(wd)) if fired.contains(&wd));
            if rescanned.is_none_or(|at| at.elapsed() >= RESCAN) {
                // Once a second every file is looked at, whatever woke the thread: a
                // missed or refused watch costs at most that second.
                rescanned = Some(Instant::now());
                self.rescan();
                woken = Woken::All;
            } else if named {
                // A new name in the directory: walked now; the files found are read
                // at once (`more`), the others only if their watch fired.
                self.rescan();
            }
            let mut grew = false;
            for i in 0..self.files.len() {
                let tail = &mut self.files[i];
                // Woken by watches, only their files (and those that just grew, or
                // have no watch) are looked at; after a quiet interval, only those
                // with no watch to wake them.
                let look = tail.more
                    || match &woken {
                        Woken::Watches(fired) => tail.wd.is_none_or(|wd| fired.contains(&wd)),
                        Woken::Timeout => tail.wd.is_none(),
                        Woken::All => true,
                    };
                if !look || tail.reader.is_none() {
                    continue;
                }
                let (batch, more) = tail.read();
                tail.more = more;
                grew |= more;
                self.feed.publish(batch);
                if self.files[i].reader.is_none() {
                    self.let_go(i);
                }
            }
            woken = if grew {
                Woken::Watches(Vec::new())
            } else {
                self.wake.sleep(POLL)
            };
        }
    }

    /// What a file that stopped being read no longer needs: its watch (unless another
    /// followed name shares it, as a file and a link to it do), its name (a new file
    /// there is followed anew) when it was removed or replaced, and what only reading
    /// on needed.
    fn let_go(&mut self, i: usize) {
        let tail = &mut self.files[i];
        let wd = tail.wd.take();
        let forget = if tail.moved { tail.path.clone() } else { None };
        tail.shed();
        if let Some(wd) = wd
            && !self.files.iter().any(|t| t.wd == Some(wd))
        {
            self.wake.unwatch(wd);
        }
        if let Some(path) = forget {
            self.seen.remove(&path);
            self.refused_said.remove(&path);
        }
    }

    /// Opens what is to be followed and is not yet: the record, or new files beneath
    /// the directory.
    fn rescan(&mut self) {
        let source = self.source.clone();
        // A name created in the directory wakes the thread and walks it at once (new
        // files in directories beneath it wait for the next walk).
        if let Source::Directory(dir) = &source
            && !self.dir_watched
        {
            self.dir_watched = true;
            self.dir_wd = self.wake.watch_dir(dir);
        }
        let paths: Vec<PathBuf> = match &source {
            Source::Store(store) => return self.rescan_store(store),
            Source::File(path) => vec![path.clone()],
            Source::Directory(dir) => match aegis_files::walk(dir, WALK) {
                Ok(found) => {
                    let mut files = Vec::new();
                    for f in found {
                        match f {
                            Found::File(path) => files.push(path),
                            Found::NotAFile { path, found } => {
                                if self.refused_said.insert(path.clone()) {
                                    self.refuse(
                                        &path,
                                        &format!(
                                            "{found}, not a regular file; not followed or opened"
                                        ),
                                    );
                                }
                            }
                        }
                    }
                    files
                }
                Err(e) => {
                    let said = format!("{e}");
                    if self.refused_said.insert(dir.clone()) {
                        self.refuse(dir, &said);
                    }
                    return;
                }
            },
        };
        for path in paths {
            if self.seen.contains(&path) {
                continue;
            }
            let growing = match Growing::open(&path) {
                // A record not written yet (a host about to start): looked for again.
                Err(aegis_files::FileError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    if self.refused_said.insert(path.clone()) {
                        self.refuse(&path, "not there yet: looked for again each second");
                    }
                    continue;
                }
                opened => opened,
            };
            let growing = match growing {
                Ok(growing) => growing,
                Err(e) => {
                    self.seen.insert(path.clone());
                    self.refuse(&path, &e.to_string());
                    continue;
                }
            };
            if !self.make_room() {
                // Looked at again once a file stops being followed (what was opened is
                // closed meanwhile).
                if self.refused_said.insert(path.clone()) {
                    self.refuse(
                        &path,
                        &format!("not followed yet: the console follows at most {MAX_FILES} files at once"),
                    );
                }
                continue;
            }
            self.seen.insert(path.clone());
            let name = growing.path().display().to_string();
            let mut tail = Tail::new(self.files.len(), name, Reader::File(growing), &self.options);
            tail.wd = self.wake.watch_file(&path);
            tail.path = Some(path);
            // Read at once, whatever woke the thread.
            tail.more = true;
            self.feed.publish(vec![Published::Event(tail.file_event())]);
            self.files.push(tail);
        }
    }

    /// Whether another file may be read: under the cap, or once the cap is reached
    /// in a directory or a store, after letting go of a file whose session closed
    /// (a session file gains nothing once closed; one record file is never let go).
    fn make_room(&mut self) -> bool {
        if self.following() < MAX_FILES {
            return true;
        }
        if matches!(self.source, Source::File(_)) {
            return false;
        }
        // A closed session's file, read to its end first: one that has grown since is
        // not closed any more, and is kept.
        for i in 0..self.files.len() {
            let tail = &mut self.files[i];
            if tail.reader.is_none() || !tail.closed || !tail.released {
                continue;
            }
            loop {
                let (batch, more) = tail.read();
                self.feed.publish(batch);
                if !more {
                    break;
                }
            }
            let tail = &mut self.files[i];
            if tail.reader.is_none() {
                // It stopped of itself while read (removed, Tampered): its place is free.
                self.let_go(i);
                return true;
            }
            if !tail.closed {
                continue;
            }
            tail.stop(format!(
                "its session closed; no longer read, to make room (the console reads at most {MAX_FILES} files at once)"
            ));
            let batch = tail.settle();
            self.feed.publish(batch);
            self.let_go(i);
            return true;
        }
        false
    }

    /// Follows the store's new sessions, and tells those followed how many lines
    /// they now hold.
    fn rescan_store(&mut self, store: &Arc<dyn SessionStore>) {
        let location = store.location();
        let listed = store.sessions().and_then(|sessions| {
            // A listing that names a session twice says two things of it: refused,
            // never read as its last mention.
            let mut ids = BTreeSet::new();
            match sessions.iter().find(|s| !ids.insert(s.id.as_str())) {
                Some(twice) => Err(format!(
                    "the store listed session {} twice; its listing is not read",
                    twice.id
                )),
                None => Ok(sessions),
            }
        });
        let sessions = match listed {
            Ok(sessions) => {
                self.refused_said.remove(&PathBuf::from(&location));
                sessions
            }
            Err(e) => {
                if self.refused_said.insert(PathBuf::from(&location)) {
                    self.refuse(std::path::Path::new(&location), &e);
                }
                return;
            }
        };
        for session in sessions {
            if let Some(&i) = self.stored.get(&session.id) {
                if let Some(Reader::Session { listed, .. }) = &mut self.files[i].reader {
                    *listed = session.lines;
                }
                continue;
            }
            let name = format!("{location} session {}", session.id);
            let path = PathBuf::from(&name);
            if self.seen.contains(&path) {
                continue;
            }
            if !self.make_room() {
                if self.refused_said.insert(path.clone()) {
                    self.refuse(
                        &path,
                        &format!("not followed yet: the console follows at most {MAX_FILES} sessions at once"),
                    );
                }
                continue;
            }
            self.seen.insert(path.clone());
            let reader = Reader::Session {
                store: store.clone(),
                id: session.id.clone(),
                next: 0,
                listed: session.lines,
                bytes: 0,
            };
            let mut tail = Tail::new(self.files.len(), name, reader, &self.options);
            tail.more = true;
            self.feed.publish(vec![Published::Event(tail.file_event())]);
            self.stored.insert(session.id, self.files.len());
            self.files.push(tail);
        }
    }

    /// How many files (or sessions) are being read now.
    fn following(&self) -> usize {
        self.files.iter().filter(|t| t.reader.is_some()).count()
    }

    /// A file event for a path that is not followed.
    fn refuse(&mut self, path: &std::path::Path, why: &str) {
        let mut o = Object::new();
        o.insert("kind", "file");
        o.insert("name", path.display().to_string());
        o.insert("verdict", "unread");
        o.insert("headline", why);
        self.feed.publish(vec![Published::Event(o)]);
    }
}

/// One file followed.
struct Tail {
    /// Its number in the feed's events.
    index: usize,
    name: String,
    /// `None` once it is no longer read.
    reader: Option<Reader>,
    /// The command that checks it offline.
    verify: Arc<str>,
    judged: Judged,
    calls: Assembler,
    /// Read to its end once, or past what it held when first read.
    caught_up: bool,
    /// Where what it held when first read ends (bytes, or a session's lines).
    backlog: u64,
    /// What it held at the start was published (or, Tampered, dropped).
    released: bool,
    /// It shrank below what was read.
    gone: bool,
    /// Its name no longer leads to it (removed or replaced), or it shrank.
    moved: bool,
    /// Its last line closed a session.
    closed: bool,
    /// Lines came, or it stopped, since its verdict was last published.
    dirty: bool,
    /// It may hold more right now: looked at again without waiting.
    more: bool,
    /// Its path, when it is a file.
    path: Option<PathBuf>,
    /// Its inotify watch, when it has one.
    wd: Option<i32>,
    /// Events not yet published: the backlog until it is read whole, then each read's.
    held: Vec<Published>,
    /// The verdict, headline and stop last published.
    said: Option<(&'static str, String, Option<String>)>,
    /// Why it is no longer read, once it is not.
    stopped: Option<String>,
    opens: HashMap<u64, Arc<[u8]>>,
    hosts: HashMap<u64, String>,
    intents: HashMap<(u64, String), Arc<[u8]>>,
    /// Parked outcomes and decisions, by approval id.
    parked: HashMap<String, Arc<[u8]>>,
    decisions: HashMap<String, Arc<[u8]>>,
}

/// What the feed needs of one accepted line beyond what the assembler reads.
struct Seen {
    line_type: String,
    call_id: Option<String>,
    /// A parked outcome's approval id, or a decision's.
    approval_id: Option<String>,
    /// The approval a resumed call ran under.
    approval_ref: Option<String>,
}

impl Seen {
    fn of(o: &Object) -> Option<Seen> {
        let str_at = |path: &[&str]| -> Option<String> {
            let (last, inner) = path.split_last()?;
            let mut at = o;
            for key in inner {
                at = at.get(key)?.as_object()?;
            }
            at.get(last)?.as_str().map(str::to_owned)
        };
        let line_type = str_at(&["line_type"])?;
        let approval_id = match line_type.as_str() {
            "decision" => str_at(&["approval_id"]),
            "outcome" => str_at(&["policy", "approval_id"]),
            _ => None,
        };
        Some(Seen {
            call_id: str_at(&["call_id"]),
            approval_ref: str_at(&["decision_axes", "approval_ref"]),
            approval_id,
            line_type,
        })
    }
}

impl Tail {
    fn new(index: usize, name: String, reader: Reader, options: &Options) -> Tail {
        let verify = match &reader {
            Reader::File(growing) => verify_file(growing.path(), options.trust.as_deref()),
            Reader::Session { store, id, .. } => store.verify_command(id),
        };
        let backlog = reader.backlog();
        Tail {
            index,
            name,
            backlog,
            verify: Arc::from(verify),
            reader: Some(reader),
            judged: Judged::new(options),
            calls: Assembler::new(),
            caught_up: false,
            released: false,
            gone: false,
            moved: false,
            closed: false,
            dirty: true,
            more: false,
            path: None,
            wd: None,
            held: Vec::new(),
            said: None,
            stopped: None,
            opens: HashMap::new(),
            hosts: HashMap::new(),
            intents: HashMap::new(),
            parked: HashMap::new(),
            decisions: HashMap::new(),
        }
    }

    /// The file's event, `reading` until its backlog is read.
    fn file_event(&self) -> Object {
        let mut o = Object::new();
        o.insert("kind", "file");
        o.insert("file", SafeInt::new(self.index as u64).unwrap_or_default());
        o.insert("name", self.name.as_str());
        o.insert("verdict", "reading");
        o.insert("headline", "reading the record");
        if let Some(why) = &self.stopped {
            o.insert("stopped", why.as_str());
        }
        o
    }

    /// Reads what the file gained: the events to publish, and whether it may hold more
    /// right now (a full chunk was read).
    fn read(&mut self) -> (Vec<Published>, bool) {
        let Some(reader) = &mut self.reader else {
            return (Vec::new(), false);
        };
        let grown = reader.next();
        let past_cap = reader.read_so_far() > MAX_FILE;
        let past_backlog = reader.past_backlog(self.backlog);
        let mut more = false;
        match grown {
            Ok((Grown::Data(bytes), full)) => {
                // A file that just grew is looked at again at once: the rest of a
                // backlog, or its end (which publishes it), without a poll's wait.
                more = full || matches!(self.reader, Some(Reader::File(_)));
                self.dirty = true;
                let mut accepted = Vec::new();
                let tampered = self.judged.push(&bytes, |at, line| {
                    accepted.push((at, Arc::<[u8]>::from(line)))
                });
                for (at, line) in accepted {
                    self.line(at, line);
                }
                if tampered {
                    self.stop("nothing after the line that contradicts the record is read".into());
                } else if past_cap {
                    self.stop(format!(
                        "past {} MiB: no longer followed here; aegis log and aegis verify read it whole",
                        MAX_FILE >> 20
                    ));
                }
            }
            Ok((Grown::Idle, _)) => self.caught_up = true,
            // The bytes read were the file's: it keeps its verdict, and a file at its
            // name now is followed as one of its own, judged on its own.
            Ok((Grown::Removed(why), _)) => {
                self.moved = true;
                self.stop(format!("{why}; no longer followed"));
            }
            Ok((Grown::Replaced(why), _)) => {
                self.moved = true;
                self.stop(format!(
                    "{why}; no longer followed (the new file is followed as one of its own)"
                ));
            }
            Ok((Grown::Gone(why), _)) => {
                self.gone = true;
                self.moved = true;
                self.stop(format!(
                    "{why}; a record only grows, so it is no longer followed"
                ));
            }
            Err(e) => self.stop(format!("unreadable: {e}")),
        }
        // What the file held when first read is published once all of it is read, even
        // while a writer keeps adding more.
        self.caught_up |= past_backlog;
        if !self.caught_up && self.reader.is_some() {
            // Still reading what the file held at the start.
            return (Vec::new(), more);
        }
        (self.settle(), more && self.reader.is_some())
    }

    /// The events of the lines read since the last publication and, when it changed,
    /// the file's verdict (judged again only after new lines or a stop).
    fn settle(&mut self) -> Vec<Published> {
        let mut out = Vec::new();
        if !self.dirty {
            return out;
        }
        self.dirty = false;
        let report = self.judged.report();
        let (mut verdict, mut headline) = verdict_of(&report);
        if self.gone {
            verdict = "tampered";
            headline = format!("Tampered — {}", self.stopped.as_deref().unwrap_or_default());
        }
        if !self.released {
            self.released = true;
            // A backlog that turned out Tampered is evidence of nothing: none of it is
            // shown.
            if verdict == "tampered" {
                self.held.clear();
            }
        }
        out.append(&mut self.held);
        let now = (verdict, headline, self.stopped.clone());
        if self.said.as_ref() != Some(&now) {
            let mut event = self.file_event();
            event.insert("verdict", now.0);
            event.insert("headline", now.1.as_str());
            out.push(Published::Event(event));
            self.said = Some(now);
        }
        out
    }

    /// Drops what only reading on needed (the verifier's state, a partial line, the
    /// evidence indexes): a stopped file keeps its verdict and its published calls.
    fn shed(&mut self) {
        if self.dirty {
            return;
        }
        self.judged = Judged::new(&Options::default());
        self.calls = Assembler::new();
        self.opens = HashMap::new();
        self.hosts = HashMap::new();
        self.intents = HashMap::new();
        self.parked = HashMap::new();
        self.decisions = HashMap::new();
    }

    fn stop(&mut self, why: String) {
        self.reader = None;
        self.stopped = Some(why);
        self.dirty = true;
    }

    /// One accepted line, at `at`.
    fn line(&mut self, at: Position, line: Arc<[u8]>) {
        // Parsed once, for both what the evidence needs and the call's row.
        let parsed = match aegis_record::json::parse(line.strip_suffix(b"\n").unwrap_or(&line)) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        };
        let seen = parsed.as_ref().and_then(Seen::of);
        self.closed = seen.as_ref().is_some_and(|s| s.line_type == "close");
        let entries = parsed
            .as_ref()
            .map(|o| self.calls.line_object(at.session, o))
            .unwrap_or_default();
        if let Some(seen) = &seen {
            match seen.line_type.as_str() {
                "open" => {
                    self.opens.insert(at.session, line.clone());
                }
                "intent" => {
                    if let Some(call) = &seen.call_id {
                        self.intents
                            .insert((at.session, call.clone()), line.clone());
                    }
                }
                "decision" => {
                    if let Some(id) = &seen.approval_id {
                        self.decisions.insert(id.clone(), line.clone());
                    }
                }
                "outcome" => {
                    if let Some(id) = &seen.approval_id {
                        self.parked.insert(id.clone(), line.clone());
                    }
                }
                _ => {}
            }
        }
        for entry in entries {
            let published = match entry {
                Entry::Session(session, opened) => self.session_event(session, &opened),
                Entry::Call(row) => {
                    let mut lines = Vec::new();
                    if let Some(open) = self.opens.get(&row.session) {
                        lines.push(("open", open.clone()));
                    }
                    if let Some(intent) = self.intents.remove(&(row.session, row.call_id.clone())) {
                        lines.push(("intent", intent));
                    }
                    // This line is the call's own when it is its outcome (or the tool
                    // change); a call without an outcome is listed at a close or open.
                    let own = seen.as_ref().filter(|s| {
                        s.line_type == "tool_change"
                            || s.line_type == "outcome"
                                && s.call_id.as_deref() == Some(row.call_id.as_str())
                    });
                    if let Some(reference) = own.and_then(|s| s.approval_ref.as_ref()) {
                        if let Some(parked) = self.parked.get(reference) {
                            lines.push(("parked", parked.clone()));
                        }
                        if let Some(decision) = self.decisions.get(reference) {
                            lines.push(("decision", decision.clone()));
                        }
                    }
                    if let Some(s) = own {
                        let kind = if s.line_type == "tool_change" {
                            "tool_change"
                        } else {
                            "outcome"
                        };
                        lines.push((kind, line.clone()));
                    }
                    let row_json = row.to_json();
                    let mut event = Object::new();
                    event.insert("kind", "call");
                    event.insert("file", SafeInt::new(self.index as u64).unwrap_or_default());
                    if let Some(host) = self.hosts.get(&row.session) {
                        event.insert("host", host.as_str());
                    }
                    event.insert("row", row_json.clone());
                    Published::Call(
                        event,
                        Evidence {
                            file: self.name.clone(),
                            lines,
                            row: row_json,
                            verify: self.verify.clone(),
                        },
                    )
                }
            };
            self.held.push(published);
        }
    }

    fn session_event(&mut self, session: u64, opened: &Opened) -> Published {
        if let Some(host) = opened.hostname() {
            self.hosts.insert(session, host.to_owned());
        }
        let mut o = Object::new();
        o.insert("kind", "session");
        o.insert("file", SafeInt::new(self.index as u64).unwrap_or_default());
        o.insert("session", opened.to_json(session));
        Published::Event(o)
    }
}

/// The `aegis verify` command for `file` (with the keys it is pinned to), its path
/// quoted for a POSIX shell.
fn verify_file(file: &std::path::Path, trust: Option<&[TrustAnchor]>) -> String {
    let mut command = String::from("aegis verify");
    for key in trust.unwrap_or_default() {
        command.push_str(" --key ");
        command.push_str(&key.to_hex());
    }
    command.push_str(" -- '");
    command.push_str(&file.display().to_string().replace('\'', r"'\''"));
    command.push('\'');
    command
}

/// Where a followed record's bytes come from.
enum Reader {
    File(Growing),
    /// One session of a store, read by line index.
    Session {
        store: Arc<dyn SessionStore>,
        id: String,
        /// The next line to read.
        next: u64,
        /// How many lines the store last listed the session with.
        listed: u64,
        /// Bytes read so far.
        bytes: u64,
    },
}

impl Reader {
    /// What the record gained since the last call, and whether there may be more
    /// right now (a full chunk or page was read).
    fn next(&mut self) -> Result<(Grown, bool), String> {
        match self {
            Reader::File(growing) => {
                let grown = growing.next(CHUNK).map_err(|e| e.to_string())?;
                let full = matches!(&grown, Grown::Data(d) if d.len() == CHUNK);
                Ok((grown, full))
            }
            Reader::Session {
                store,
                id,
                next,
                listed,
                bytes,
            } => {
                if *listed < *next {
                    return Ok((
                        Grown::Gone(format!(
                            "the store now lists {listed} lines of session {id}, after {next} were read"
                        )),
                        false,
                    ));
                }
                if *listed == *next {
                    return Ok((Grown::Idle, false));
                }
                // No more than the listing named: lines committed since are read after
                // the next listing, which then names them too.
                let want = u32::try_from(*listed - *next)
                    .unwrap_or(u32::MAX)
                    .min(STORE_PAGE);
                let mut lines = store.read(id, *next, want)?;
                lines.truncate(want as usize);
                if lines.is_empty() {
                    return Ok((Grown::Idle, false));
                }
                let full = lines.len() == want as usize && *next + u64::from(want) < *listed;
                *next += lines.len() as u64;
                let mut data = Vec::new();
                for line in lines {
                    data.extend_from_slice(&line);
                    data.push(b'\n');
                }
                *bytes += data.len() as u64;
                Ok((Grown::Data(data), full))
            }
        }
    }

    fn read_so_far(&self) -> u64 {
        match self {
            Reader::File(growing) => growing.read_so_far(),
            Reader::Session { bytes, .. } => *bytes,
        }
    }

    /// Whether what the record held when it was first read has all been read: its
    /// backlog can then be published, however fast a writer goes on adding to it.
    fn past_backlog(&self, backlog: u64) -> bool {
        match self {
            Reader::File(growing) => growing.read_so_far() >= backlog,
            Reader::Session { next, .. } => *next >= backlog,
        }
    }

    /// Where the backlog ends: the file's length, or the session's lines, when first
    /// read.
    fn backlog(&self) -> u64 {
        match self {
            Reader::File(growing) => growing.opened_len(),
            Reader::Session { listed, .. } => *listed,
        }
    }
}

/// A report's verdict as the page names it (`verified` only when pinned to keys the
/// operator named; `unpinned` when consistent but signed by keys nobody vouched for),
/// and its headline, which names a published test key when one signed.
pub fn verdict_of(report: &Report) -> (&'static str, String) {
    let verdict = match report.verdict() {
        Verdict::Verified(Trust::Unpinned) => "unpinned",
        Verdict::Verified(Trust::PinnedTo(_) | Trust::Pinned) => "verified",
        Verdict::Indeterminate(_) => "indeterminate",
        Verdict::Tampered(_) => "tampered",
    };
    let mut headline = report.headline();
    let test_keys = report.published_test_keys();
    if !test_keys.is_empty() {
        let names: Vec<&str> = test_keys.iter().map(|(_, name)| *name).collect();
        headline.push_str(&format!(
            "; signed by a published test key ({}): its seed is public, so this proves nothing about who wrote it",
            names.join(", ")
        ));
    }
    (verdict, headline)
}
