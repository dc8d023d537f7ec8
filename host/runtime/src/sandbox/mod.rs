//! Model A: a wasmtime store per call, configured from the grant alone.
//!
//! A tool is a component of one of two shapes, found once when it is prepared:
//! - a wasip2 *command* (exports `wasi:cli/run`): the call's input is its stdin,
//!   its stdout is the output, its exit status says how it ended;
//! - an `aegis:tool/tool` *world* component (`tests/fixtures/wit/tool.wit`):
//!   `export run: func(input: list<u8>) -> result<list<u8>, string>`. The input
//!   is the `input` argument, `ok` is the output, and `err` is the tool declining
//!   ([`Ending::ToolError`]). It may import WASI; its stdin is empty and its stdout
//!   is discarded (the return value is the only way out).
//!
//! # Guarantees
//! - The guest sees only the grant's roots, as preopens under their canonical paths:
//!   read roots read-only, write roots read-write. Each preopen is the directory the
//!   capability station opened when the tool was registered (reached through its held
//!   descriptor, and checked to be that device and inode before the call starts), never
//!   a fresh resolution of the root's path. No environment, no arguments beyond
//!   those given, no sockets (a fresh WASI context has networking off). Both shapes
//!   get the same context.
//! - Memory: a limiter ([`limiter`]) holds the *total* of all linear memories and
//!   all table slots to the grant's ceiling, bounds the instances, tables and memories
//!   of a call, and reports the true peak (memories plus tables).
//! - Time: the call runs as a future (wasmtime's async API) driven with its deadline;
//!   at the deadline the future is dropped wherever the call is: in guest code (which
//!   yields to the host at every epoch tick) or waiting in a host call (a sleep, a
//!   poll, a file open). It ends `resource_exceeded` `wall_time`.
//! - Cancellation: [`Sandbox::run_cancellable`] takes a [`CancelToken`]; cancelling it
//!   from any thread stops the call the same way ([`Ending::Cancelled`]).
//! - Output: a command's stdout is captured up to the ceiling; a world's `ok` bytes
//!   and `err` message are held to the same ceiling. Either over it fails closed
//!   (`resource_exceeded` output) and none of it is returned. Stderr, which goes to
//!   the operator and not to the caller, is held to the same ceiling (or 64 KiB if
//!   that is lower), whatever the ending.
//! - A component that is neither shape (or exports both) is refused when prepared,
//!   before any guest code runs.
//! - What runs is what the record names: a component is read once and those bytes are
//!   both hashed and compiled; a grant whose `component_digest` (taken at registration)
//!   differs is refused before any guest code runs.
//! - Instances come from a pool of slots (by default; see [`Options`]) that wasmtime
//!   resets between uses: no call sees memory an earlier call wrote (tested with a guest
//!   that reports what it finds). A call beyond the pool's size is refused
//!   ([`SandboxError::AtCapacity`]) before any guest code runs, never queued or
//!   reported as the guest's trap.
//!
//! # Non-guarantees
//! - A guest running its own code is stopped at the next epoch tick ([`TICK`]) after
//!   its deadline; one waiting in a host call, within the runtime timer's millisecond.
//! - Dropping the call stops the *call*, not a thread the kernel holds: a host call
//!   that wasmtime-wasi runs on a blocking thread (opening a FIFO nobody writes, a
//!   read of a slow file) is abandoned there, and that thread stays blocked until the
//!   kernel lets it go. The call has ended and its outcome is recorded; the thread is
//!   the host's cost (tokio's blocking pool bounds how many there can be).
//! - [`Sandbox::run`] blocks its thread on the sandbox's runtime: call it from a plain
//!   thread (or `spawn_blocking`), not from inside an async task. A caller already in a
//!   tokio runtime awaits [`Sandbox::run_async`] instead; the guarantees are the same.
//! - A guest with a write root can create a symlink there whose *relative* target
//!   leads out (`link -> ../secret`). No call can follow it out (resolution stays
//!   beneath the preopen, and a Model B context resolves through cap-std), but the
//!   link outlives the call: software outside Aegis that follows links under a write
//!   root must not trust them. Absolute targets are refused when the link is made.
//! - A host bug in wasmtime or wasmtime-wasi is outside what this module can contain.
//! - The compilation cache ([`Sandbox::with_cache_dir`]) holds native code that is
//!   loaded and run without any signature: whoever can write to the directory can run
//!   code in this process. It is only as safe as the directory's permissions, which is
//!   why a directory others can reach is refused.
//! - The world shape's `err` message is the guest's words, not a verified reason.
//! - A world's `ok` bytes or `err` message are copied into host memory before the
//!   output ceiling is checked, so one call can briefly hold up to its memory ceiling
//!   on the host (a command's stdout pipe stops at the output ceiling plus one byte).
//!
//! # Limits
//! - [`MAX_COMPONENT`] (256 MiB): the largest component file read.
//! - [`TICK`] (5 ms): the wall-clock resolution for a guest running its own code, and
//!   the ticker thread's period.
//! - [`DEFAULT_CONCURRENT_CALLS`] (64) calls at once per sandbox. The pool reserves
//!   address space (not memory) up front: 4 GiB plus guard pages per memory slot, two
//!   slots per call, and one fiber stack per call (wasmtime's default size, 2 MiB).
//! - Each call runs on a wasmtime fiber and is driven by the sandbox's runtime. Run 5
//!   of `benches/results/sandbox.md` put that at tens of microseconds per warm call;
//!   run 6 found most of it was wasmtime's component-model-async machinery, now left
//!   out of the build.
//! - Stderr: the lower of the grant's output ceiling and 64 KiB per call; past it the
//!   guest's stderr is a closed stream (its writes fail), nothing more reaches the host.
//! - Resident memory: a pooled slot keeps up to 1 MiB of each linear memory and
//!   64 KiB of each table resident after a call (zeroed in place, not given back),
//!   for each of the warm slots wasmtime keeps (at most the pool's size).
//! - The epoch ticker: one thread per sandbox, ticking while calls run and for 250 ms
//!   after the last one (`ticker.rs`); a sandbox idle for longer wakes no thread.
//! - The runtime: one tokio worker thread per sandbox (timers), plus tokio's blocking
//!   pool for wasmtime-wasi's file operations.
//! - Cache: wasmtime's own worker trims the directory (its default soft limits on
//!   file count and total size); entries are keyed on the component's bytes and the
//!   engine's settings, so a different wasmtime build or setting never reuses them.

mod cancel;
pub mod limiter;
mod ticker;

pub use cancel::CancelToken;

use crate::capability::{Grant, Limits};
use aegis_record::ComponentDigest;
use limiter::{Ceiling, MAX_INSTANCES, MAX_MEMORIES, MAX_TABLES};
use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::{Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};
use ticker::Ticker;
use wasmtime::component::types::{ComponentItem, Type};
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker, ResourceTable};
use wasmtime::{
    Cache, CacheConfig, Config, Enabled, Engine, InstanceAllocationStrategy,
    PoolConcurrencyLimitError, PoolingAllocationConfig, Store, Trap,
};
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxView, WasiView};

/// The largest component file read. Real tool components are kilobytes to a few tens of
/// MiB (an interpreter compiled in: CPython's is about 30 MiB); 256 MiB is far past
/// them, while the file is held in memory whole to be digested and compiled, so a file
/// grown without end must stop somewhere. Read as every operator file is: never through
/// a final symbolic link, never a FIFO or a device (`aegis_files`).
pub const MAX_COMPONENT: aegis_files::Cap = aegis_files::Cap::new(256 << 20, "a component");

/// The epoch ticker's period: the resolution of the wall-clock ceiling.
pub const TICK: Duration = Duration::from_millis(5);

/// Bytes of each pooled linear memory that are zeroed in place, not given back, when
/// a call ends (see `pooling`).
const KEEP_RESIDENT_MEMORY: usize = 1 << 20;

/// Bytes of each pooled table zeroed in place when a call ends.
const KEEP_RESIDENT_TABLE: usize = 64 << 10;

/// How many calls one [`Sandbox`] runs at once by default (see [`Options`]).
pub const DEFAULT_CONCURRENT_CALLS: u32 = 64;

/// How a [`Sandbox`] is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// wasmtime's compilation cache in this directory (see [`Sandbox::with_cache_dir`]);
    /// `None` compiles every component in this process.
    pub cache_dir: Option<PathBuf>,
    /// `Some(n)`: instances come from a pool of `n` slots reserved up front, reset
    /// between calls, and a call beyond `n` at once is refused
    /// ([`SandboxError::AtCapacity`]). `None`: every call maps fresh memory, with no
    /// bound but the host's (slower: the kernel builds and tears down each instance's
    /// reservation per call; `benches/results/sandbox.md`).
    pub concurrent_calls: Option<u32>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            cache_dir: None,
            concurrent_calls: Some(DEFAULT_CONCURRENT_CALLS),
        }
    }
}

/// The pool for `calls` concurrent calls. Its per-component bounds are the limiter's
/// per-call bounds ([`limiter`]), so a component is held to the same numbers with or
/// without a pool (the pool refuses it when prepared, the limiter when it
/// instantiates). A Rust wasip2 command has a handful of core instances and one
/// memory; the pool holds two memories per call on average, so calls that use more
/// fill it sooner ([`SandboxError::AtCapacity`]).
fn pooling(calls: u32) -> PoolingAllocationConfig {
    let per_call = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(calls)
        .max_core_instances_per_component(per_call(MAX_INSTANCES))
        .total_core_instances(calls.saturating_mul(per_call(MAX_INSTANCES)))
        .max_memories_per_component(per_call(MAX_MEMORIES))
        .total_memories(calls.saturating_mul(2))
        .max_tables_per_component(per_call(MAX_TABLES))
        .total_tables(calls.saturating_mul(per_call(MAX_TABLES)))
        // Every call runs on a fiber stack of its own.
        .total_stacks(calls)
        // The grant's limiter is the memory ceiling; the pool must not be a lower,
        // silent one. 4 GiB is all a 32-bit memory can address.
        .max_memory_size(4 << 30)
        // Resetting a slot: the pages a call wrote, found with PAGEMAP_SCAN (Linux
        // 6.7+; elsewhere the low bytes), are zeroed in place up to these sizes, and
        // only the rest is given back with madvise. Either way the next call finds
        // zeroes; in place it costs no system call, no TLB shootdown on the other
        // CPUs and no page faults when the slot is used again (run 7 in
        // benches/results/sandbox.md). The price is resident memory: up to these
        // sizes for each warm slot.
        .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
        .table_keep_resident(KEEP_RESIDENT_TABLE)
        .pagemap_scan(Enabled::Auto);
    pool
}

/// The most stderr kept for diagnostics (less when the grant's output ceiling is lower).
const STDERR_CAP: usize = 64 << 10;

pub use crate::outcome::{Ending, Exceeded};

/// The ceilings' word on a finished run, the one rule for both tool models (the
/// sandbox here, host handlers in [`crate::handler`]): `produced` bytes over the
/// grant's `max_output_bytes` (output, or the tool's own error message) is
/// [`Exceeded::Output`]; otherwise the first ceiling that tripped while it ran, even
/// if the tool handled the failure and went on. `None`: no ceiling stopped it, and
/// what it produced may be handed back.
pub(crate) fn ceiling_hit(
    limits: &Limits,
    produced: usize,
    tripped: Option<Exceeded>,
) -> Option<Exceeded> {
    let over = u64::try_from(produced).map_or(true, |n| n > limits.max_output_bytes);
    if over {
        Some(Exceeded::Output)
    } else {
        tripped
    }
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct Execution {
    /// How it ended.
    pub ending: Ending,
    /// The output (a command's stdout, a world's `ok` bytes), only when the run
    /// succeeded: nothing else leaves the sandbox.
    pub output: Option<Vec<u8>>,
    /// Stderr, for diagnostics, whatever the shape or ending: at most the grant's
    /// output ceiling, and at most 64 KiB.
    pub stderr: Vec<u8>,
    /// Wall time in the sandbox.
    pub wall_ms: u64,
    /// Peak of linear memory and table slots together (see [`limiter`]).
    pub peak_memory_bytes: u64,
}

/// A failure of the host, not of the guest: the component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The engine could not be built.
    #[error("wasmtime engine: {0}")]
    Engine(String),
    /// The component could not be read, compiled or linked.
    #[error("component {path}: {message}")]
    Component {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// A preopen from the grant could not be opened.
    #[error("preopen {path}: {message}")]
    Preopen {
        /// The root.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// Every slot of the instance pool is in use: the call was not started.
    #[error("the sandbox is at capacity: {0}")]
    AtCapacity(String),
    /// The compilation cache directory could not be used, or others can reach it.
    #[error("compilation cache {path}: {message}")]
    Cache {
        /// The directory.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

/// Which of the two tool shapes a component has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A wasip2 command: exports `wasi:cli/run`; input on stdin, output on stdout.
    Command,
    /// Exports the `aegis:tool/tool` world's `run`; input and output as values.
    Tool,
}

/// Compilation cache counters of one [`Sandbox`], since it was built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheStats {
    /// Compilations served from the cache directory.
    pub hits: usize,
    /// Compilations done here and then written to the cache directory.
    pub misses: usize,
}

/// A prepared component: pre-linked, with the export to call already found.
#[derive(Clone)]
enum Prepared {
    Command(CommandPre<CallState>),
    Tool {
        pre: InstancePre<CallState>,
        run: ComponentExportIndex,
    },
}

/// The world `run`'s results. Lifted eagerly: wasmtime 48 runs the guest's
/// post-return (which frees the buffer) inside `call`, so a lazy `WasmList` would
/// read freed guest memory. The `world-read-file` test caught exactly that.
type ToolResult = (Result<Vec<u8>, String>,);

/// Finds the shape of `component`, or says why it has none.
fn shape_of(linker: &Linker<CallState>, component: &Component) -> wasmtime::Result<Prepared> {
    let pre = linker.instantiate_pre(component)?;
    let command = CommandPre::new(pre.clone()).ok();
    let tool = match component.get_export(None, "run") {
        Some((ComponentItem::ComponentFunc(func), index)) => {
            let list_of_u8 = |t: &Type| matches!(t, Type::List(l) if l.ty() == Type::U8);
            let params: Vec<Type> = func.params().map(|(_, t)| t).collect();
            let results: Vec<Type> = func.results().collect();
            let fits = !func.async_()
                && matches!(params.as_slice(), [p] if list_of_u8(p))
                && matches!(results.as_slice(), [Type::Result(r)]
                    if r.ok().as_ref().is_some_and(list_of_u8) && r.err() == Some(Type::String));
            fits.then_some(index)
        }
        _ => None,
    };
    match (command, tool) {
        (Some(command), None) => Ok(Prepared::Command(command)),
        (None, Some(run)) => Ok(Prepared::Tool { pre, run }),
        (Some(_), Some(_)) => Err(wasmtime::Error::msg(
            "exports both wasi:cli/run and the aegis tool world's run; a tool has one shape",
        )),
        (None, None) => Err(wasmtime::Error::msg(
            "exports neither wasi:cli/run nor the aegis tool world's run \
             (run: func(input: list<u8>) -> result<list<u8>, string>)",
        )),
    }
}

struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: Ceiling,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The engine, the linker, pre-instantiated components and the epoch ticker.
pub struct Sandbox {
    engine: Engine,
    linker: Linker<CallState>,
    /// Each component prepared so far, with the digest of the bytes compiled.
    ready: Mutex<HashMap<PathBuf, (Prepared, ComponentDigest)>>,
    cache: Option<Cache>,
    ticker: Ticker,
    /// Drives every call's future (timers, wasmtime-wasi's tasks); `None` only once
    /// dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").finish_non_exhaustive()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Without waiting: a blocking thread abandoned by a stopped call may never
        // return (see the non-guarantees), and dropping would wait for it.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Makes `dir` (mode 0700 when created) and checks that only this user can reach it:
/// cached code is run as native code, so a directory others can write to (or create
/// entries under, through a group-writable subdirectory) would let them run code here.
fn private_cache_dir(dir: &Path) -> Result<PathBuf, SandboxError> {
    let failed = |message: String| SandboxError::Cache {
        path: dir.to_owned(),
        message,
    };
    let dir = std::path::absolute(dir).map_err(|e| failed(e.to_string()))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| failed(e.to_string()))?;
    let meta = std::fs::metadata(&dir).map_err(|e| failed(e.to_string()))?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(failed(format!(
            "owned by uid {}, not by this user (uid {me}); cached code runs as native code",
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(failed(format!(
            "mode {mode:o} lets others in; cached code runs as native code, use mode 700"
        )));
    }
    Ok(dir)
}

impl Sandbox {
    /// Builds the engine (epoch interruption on) and starts its ticker. Every
    /// component is compiled in this process: no compilation cache.
    ///
    /// # Errors
    /// The engine or linker could not be built.
    pub fn new() -> Result<Sandbox, SandboxError> {
        Sandbox::with_options(&Options::default())
    }

    /// Like [`Sandbox::new`], with wasmtime's compilation cache in `dir`: a
    /// component compiled once (by any process using the same directory and the same
    /// wasmtime build and settings) is loaded from there instead of compiled again.
    /// `dir` is created with mode 0700 if missing.
    ///
    /// By default ([`Sandbox::new`]) there is no cache. Caching widens trust: see the
    /// module's non-guarantees.
    ///
    /// # Errors
    /// [`SandboxError::Cache`] if `dir` cannot be created, is not owned by this user,
    /// or is reachable by group or others; otherwise as [`Sandbox::new`].
    pub fn with_cache_dir(dir: &Path) -> Result<Sandbox, SandboxError> {
        Sandbox::with_options(&Options {
            cache_dir: Some(dir.to_owned()),
            ..Options::default()
        })
    }

    /// A sandbox built as `options` say.
    ///
    /// # Errors
    /// As [`Sandbox::with_cache_dir`] for the cache; otherwise the engine or the pool
    /// could not be built.
    pub fn with_options(options: &Options) -> Result<Sandbox, SandboxError> {
        let cache = match &options.cache_dir {
            Some(dir) => {
                let dir = private_cache_dir(dir)?;
                let mut config = CacheConfig::new();
                config.with_directory(&dir);
                Some(Cache::new(config).map_err(|e| SandboxError::Cache {
                    path: dir,
                    message: format!("{e:#}"),
                })?)
            }
            None => None,
        };
        Sandbox::build(cache, options.concurrent_calls)
    }

    fn build(cache: Option<Cache>, concurrent_calls: Option<u32>) -> Result<Sandbox, SandboxError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        // Off (wasmtime's default too), said here because the limiter's table slot
        // size depends on it: continuation tables have slots twice as large.
        config.wasm_stack_switching(false);
        config.wasm_component_model(true);
        config.cache(cache.clone());
        if let Some(calls) = concurrent_calls {
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(calls)));
        }
        let engine = Engine::new(&config).map_err(|e| SandboxError::Engine(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| SandboxError::Engine(e.to_string()))?;
        // The calls run on their callers' threads (`block_on`); the one worker only
        // drives timers and whatever wasmtime-wasi spawns.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("aegis-sandbox")
            .enable_all()
            .build()
            .map_err(|e| SandboxError::Engine(format!("tokio runtime: {e}")))?;
        let ticking = engine.clone();
        let ticker = Ticker::start(move || ticking.increment_epoch())
            .map_err(|e| SandboxError::Engine(e.to_string()))?;
        Ok(Sandbox {
            engine,
            linker,
            ready: Mutex::new(HashMap::new()),
            cache,
            ticker,
            runtime: Some(runtime),
        })
    }

    /// The compilation cache's hits and misses so far; `None` without a cache.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(|c| CacheStats {
            hits: c.cache_hits(),
            misses: c.cache_misses(),
        })
    }

    /// Compiles (or loads from the cache), links and pre-instantiates `component`
    /// and finds its shape, without running anything. [`Sandbox::run`] does this on
    /// first use; calling it first moves that cost out of the first call.
    ///
    /// # Errors
    /// [`SandboxError::Component`] if the file cannot be read or compiled, needs
    /// imports beyond WASI preview 2, or is neither shape.
    pub fn prepare(&self, component: &Path) -> Result<Shape, SandboxError> {
        Ok(match self.prepared(component)?.0 {
            Prepared::Command(_) => Shape::Command,
            Prepared::Tool { .. } => Shape::Tool,
        })
    }

    fn prepared(&self, component: &Path) -> Result<(Prepared, ComponentDigest), SandboxError> {
        let mut ready = self.ready.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pre) = ready.get(component) {
            return Ok(pre.clone());
        }
        let failed = |message: String| SandboxError::Component {
            path: component.to_owned(),
            message,
        };
        // Read once and compile those bytes, so the digest names exactly what runs.
        let bytes = aegis_files::read(component, MAX_COMPONENT)
            .map_err(|e| failed(e.into_io().to_string()))?;
        let digest = ComponentDigest::of_component(&bytes);
        let compiled = Component::new(&self.engine, &bytes).map_err(|e| failed(e.to_string()))?;
        let pre = shape_of(&self.linker, &compiled).map_err(|e| failed(e.to_string()))?;
        ready.insert(component.to_owned(), (pre.clone(), digest));
        Ok((pre, digest))
    }

    /// Runs `component` under `grant`. A command gets `input` on stdin and `args` as
    /// its arguments (after a program name); its stdout is returned only on success.
    /// A world component gets `input` as `run`'s argument (and `args` likewise as
    /// its WASI arguments); its `ok` bytes are returned, its `err` message becomes
    /// [`Ending::ToolError`].
    ///
    /// # Errors
    /// A host failure (the component cannot be loaded or has neither shape, a
    /// preopen cannot be opened). Everything the guest does, traps included, is an
    /// [`Execution`].
    pub fn run(
        &self,
        component: &Path,
        grant: &Grant,
        input: &[u8],
        args: &[&str],
    ) -> Result<Execution, SandboxError> {
        self.run_cancellable(component, grant, input, args, &CancelToken::new())
    }

    /// [`Sandbox::run`], stopped early if `cancel` is cancelled (from any thread):
    /// the call then ends [`Ending::Cancelled`] with the token's reason.
    ///
    /// # Errors
    /// As [`Sandbox::run`].
    pub fn run_cancellable(
        &self,
        component: &Path,
        grant: &Grant,
        input: &[u8],
        args: &[&str],
        cancel: &CancelToken,
    ) -> Result<Execution, SandboxError> {
        self.block_on(self.run_async(component, grant, input, args, cancel))?
    }

    /// Drives `future` to its end on this thread, in the sandbox's own runtime (its
    /// timers and wasmtime-wasi's blocking pool). An error only while the sandbox is
    /// being dropped. Like [`Sandbox::run`], not for use inside an async task.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> Result<F::Output, SandboxError> {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| SandboxError::Engine("the sandbox's runtime is shut down".into()))?;
        Ok(runtime.block_on(future))
    }

    /// [`Sandbox::run_cancellable`] as a future, for a caller already inside a tokio
    /// runtime: the call is driven by the task that awaits it, so no thread hands it
    /// over and none waits for it. The runtime must have its timer on (the deadline is
    /// a tokio sleep) and its blocking pool serves wasmtime-wasi's file operations.
    /// The guest hands control back at every epoch tick ([`TICK`]), so a guest
    /// computing holds the awaiting task's worker for at most a tick at a time.
    /// Dropping the future stops the call where it is, as a deadline would, and
    /// produces no [`Execution`].
    ///
    /// # Errors
    /// As [`Sandbox::run`].
    pub async fn run_async(
        &self,
        component: &Path,
        grant: &Grant,
        input: &[u8],
        args: &[&str],
        cancel: &CancelToken,
    ) -> Result<Execution, SandboxError> {
        let (prepared, digest) = self.prepared(component)?;
        // The grant names the component registered; running other bytes under it would
        // make the record name something that did not run.
        if let Some(registered) = grant.component_digest()
            && registered != digest
        {
            return Err(SandboxError::Component {
                path: component.to_owned(),
                message: format!(
                    "its bytes (sha256 {digest}) are not the ones registered for the tool \
                     (sha256 {registered}); it changed after registration"
                ),
            });
        }
        let limits = grant.limits();
        let cap = usize::try_from(limits.max_output_bytes).unwrap_or(usize::MAX - 1);
        // One byte over the ceiling tells "exactly at the cap" from "tried to write more".
        let stdout = MemoryOutputPipe::new(cap.saturating_add(1));
        // Stderr goes to the operator, not the caller, but it is still a way out of
        // the sandbox: the grant's output ceiling holds it too.
        let stderr = MemoryOutputPipe::new(STDERR_CAP.min(cap));
        let mut wasi = WasiCtx::builder();
        let mut argv = vec!["tool"];
        argv.extend_from_slice(args);
        wasi.args(&argv).stderr(stderr.clone());
        if let Prepared::Command(_) = prepared {
            // A world component's stdin stays empty and its stdout a sink: its
            // input and output travel as values.
            wasi.stdin(MemoryInputPipe::new(input.to_vec()))
                .stdout(stdout.clone());
        }
        for (roots, perms) in [
            (grant.read_roots(), FsPerms::ReadOnly),
            (grant.write_roots(), FsPerms::ReadWrite),
        ] {
            for root in roots {
                preopen_held(&mut wasi, root, perms)?;
            }
        }
        let memory = Ceiling::new(usize::try_from(limits.max_memory_bytes).unwrap_or(usize::MAX));
        let mut store = Store::new(
            &self.engine,
            CallState {
                wasi: wasi.build(),
                table: ResourceTable::new(),
                memory,
            },
        );
        store.limiter(|s| &mut s.memory);
        // Guest code hands control back to the host at every tick, so the deadline
        // and the cancel token are looked at while it spins, too.
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);

        let started = Instant::now();
        let _ticking = self.ticker.enter();
        let deadline = started.checked_add(Duration::from_millis(limits.max_wall_ms));
        // What the guest's own code decided, before the ceilings are consulted. The
        // call's future borrows the store; whichever branch wins, it is dropped (and
        // with it any host call it was waiting in) before the store is read.
        let (result, returned) = {
            let mut cancelled = pin!(cancel.cancelled());
            let mut timeout = pin!(until(deadline));
            let mut call = pin!(guest_call(&prepared, &mut store, input, &stdout, cap));
            // Biased: cancellation, then the deadline, then the call.
            poll_fn(|cx| {
                if let Poll::Ready(why) = cancelled.as_mut().poll(cx) {
                    return Poll::Ready((Ok(Said::Stopped(Ending::Cancelled(why))), None));
                }
                if timeout.as_mut().poll(cx).is_ready() {
                    let stop = Ending::Exceeded(Exceeded::WallTime);
                    return Poll::Ready((Ok(Said::Stopped(stop)), None));
                }
                call.as_mut()
                    .poll(cx)
                    .map(|(said, returned)| (said, Some(returned)))
            })
            .await
        };
        // A stopped command may already have written past the cap.
        let returned = returned.unwrap_or_else(|| stdout.contents().len());
        let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        // A full pool is the host's limit, not the guest's doing: no guest code ran.
        if let Err(e) = &result
            && let Some(full) = e
                .chain()
                .find_map(|c| c.downcast_ref::<PoolConcurrencyLimitError>())
        {
            return Err(SandboxError::AtCapacity(full.to_string()));
        }
        let state = store.data();
        let peak_memory_bytes = state.memory.peak() as u64;
        let memory_hit = state.memory.hit();
        // A ceiling that tripped is reported even when the call then ran on and was
        // stopped (or handled the failure and exited): it tripped first.
        let tripped = memory_hit.then_some(Exceeded::Memory);
        let (ending, output) = if let Some(kind) = ceiling_hit(&limits, returned, tripped) {
            (Ending::Exceeded(kind), None)
        } else {
            match result {
                Ok(Said::Output(bytes)) => (Ending::Success, Some(bytes)),
                Ok(Said::Exit(code)) => (Ending::Exit(code), None),
                Ok(Said::ToolError(message)) => (Ending::ToolError(message), None),
                Ok(Said::Stopped(ending)) => (ending, None),
                // Only said when over the cap, which was handled above.
                Ok(Said::Nothing) => (Ending::Exceeded(Exceeded::Output), None),
                Err(e) => match (e.downcast_ref::<I32Exit>(), &prepared) {
                    // `exit(0)` is how a Rust command's `main` may end.
                    (Some(I32Exit(0)), Prepared::Command(_)) => {
                        (Ending::Success, Some(stdout.contents().to_vec()))
                    }
                    (Some(I32Exit(code)), Prepared::Command(_)) => (Ending::Exit(*code), None),
                    // A world's `run` must return its result; leaving through
                    // `wasi:cli/exit` produces none, whatever the status.
                    (Some(I32Exit(code)), Prepared::Tool { .. }) => (
                        Ending::Trap(format!(
                            "exited with status {code} instead of returning from run"
                        )),
                        None,
                    ),
                    // Not configured (guests yield at the deadline instead), kept so
                    // an interrupt could never read as the guest's own trap.
                    (None, _) if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
                        (Ending::Exceeded(Exceeded::WallTime), None)
                    }
                    (None, _) => (Ending::Trap(format!("{:#}", e.root_cause())), None),
                },
            }
        };
        Ok(Execution {
            ending,
            output,
            stderr: stderr.contents().to_vec(),
            wall_ms,
            peak_memory_bytes,
        })
    }
}

/// Resolves at `deadline`; never, when the deadline is past what the clock can hold.
async fn until(deadline: Option<Instant>) {
    match deadline {
        // tokio clamps a deadline beyond its timer's range (years away) to that range.
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Instantiates and runs the guest: what its own code said, and how many bytes of
/// output it tried to hand back.
async fn guest_call(
    prepared: &Prepared,
    store: &mut Store<CallState>,
    input: &[u8],
    stdout: &MemoryOutputPipe,
    cap: usize,
) -> (wasmtime::Result<Said>, usize) {
    match prepared {
        Prepared::Command(pre) => {
            let ran = match pre.instantiate_async(&mut *store).await {
                Ok(command) => command.wasi_cli_run().call_run(&mut *store).await,
                Err(e) => Err(e),
            };
            let written = stdout.contents();
            let said = match ran {
                Ok(Ok(())) if written.len() <= cap => Ok(Said::Output(written.to_vec())),
                // Over the cap: handled by the caller, and not worth copying.
                Ok(Ok(())) => Ok(Said::Nothing),
                Ok(Err(())) => Ok(Said::Exit(1)),
                Err(e) => Err(e),
            };
            (said, written.len())
        }
        Prepared::Tool { pre, run } => {
            let ran = async {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance
                    .get_typed_func::<(&[u8],), ToolResult>(&mut *store, run)?
                    .call_async(&mut *store, (input,))
                    .await
            }
            .await;
            match ran {
                Ok((Ok(bytes),)) => {
                    let len = bytes.len();
                    (Ok(Said::Output(bytes)), len)
                }
                Ok((Err(message),)) => {
                    let len = message.len();
                    (Ok(Said::ToolError(message)), len)
                }
                Err(e) => (Err(e), 0),
            }
        }
    }
}

/// What a guest's own code produced, before the ceilings are applied.
enum Said {
    /// Output bytes (a command's stdout, or a world's `ok`).
    Output(Vec<u8>),
    /// A command's non-zero exit.
    Exit(i32),
    /// A world's `err` message.
    ToolError(String),
    /// A command's stdout over the output ceiling, deliberately not copied.
    Nothing,
    /// Stopped from outside the guest: its deadline, or its cancel token.
    Stopped(Ending),
}

/// Preopens the directory `root` holds, under its canonical path as the guest's name.
///
/// wasmtime-wasi 48 takes preopens by path only (`WasiCtxBuilder::preopened_dir`), so
/// the path given is `/proc/self/fd/<n>` of the held descriptor, which names that open
/// directory and nothing else. What that path names is then compared with the device and
/// inode recorded at registration; a mismatch (a `/proc` that is not procfs) refuses the
/// call before any guest code runs.
fn preopen_held(
    wasi: &mut wasmtime_wasi::WasiCtxBuilder,
    root: &crate::capability::HeldRoot,
    perms: FsPerms,
) -> Result<(), SandboxError> {
    let refused = |message: String| SandboxError::Preopen {
        path: root.path().to_owned(),
        message,
    };
    #[cfg(target_os = "linux")]
    {
        let by_fd = root.fd_path();
        let guest = root.path().to_string_lossy();
        wasi.preopened_dir(&by_fd, guest.as_ref(), perms)
            .map_err(|e| refused(e.to_string()))?;
        let opened = rustix::fs::stat(&by_fd).map_err(|e| refused(e.to_string()))?;
        if (opened.st_dev, opened.st_ino) != root.identity() {
            return Err(refused(format!(
                "{} does not name the directory held since registration",
                by_fd.display()
            )));
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (wasi, perms);
        Err(refused(
            "preopening a held root needs /proc/self/fd (Linux); this platform has no way \
             to hand wasmtime-wasi an open directory"
                .to_owned(),
        ))
    }
}
