//! Model A: a wasmtime store per call, configured from the grant alone.
//!
//! # Guarantees
//! - The guest sees only the grant's roots, as preopens under their canonical paths:
//!   read roots read-only, write roots read-write. No environment, no arguments beyond
//!   those given, no sockets (a fresh WASI context has networking off).
//! - Memory: a limiter caps the *total* of all linear memories at the grant's ceiling.
//! - Time: one engine-wide epoch ticker; each call gets a deadline of its ceiling in
//!   ticks, and a guest still running then is interrupted.
//! - Output: stdout is captured up to the ceiling; a guest that writes more fails
//!   closed (`resource_exceeded` output) and none of its output is returned.
//!
//! # Non-guarantees
//! - The wall-clock ceiling is enforced at tick granularity ([`TICK`]).
//! - A host bug in wasmtime or wasmtime-wasi is outside what this module can contain.

use crate::capability::Grant;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, ResourceLimiter, Store, Trap};
use wasmtime_wasi::p2::bindings::sync::CommandPre;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxView, WasiView};

/// The epoch ticker's period: the resolution of the wall-clock ceiling.
pub const TICK: Duration = Duration::from_millis(5);

/// How much of stderr is kept for diagnostics.
const STDERR_CAP: usize = 64 << 10;

/// Which ceiling stopped a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exceeded {
    /// Total linear memory.
    Memory,
    /// Wall-clock time.
    WallTime,
    /// Output bytes.
    Output,
}

impl Exceeded {
    /// The record's `resource_exceeded.kind`.
    pub fn kind(self) -> &'static str {
        match self {
            Exceeded::Memory => "memory",
            Exceeded::WallTime => "wall_time",
            Exceeded::Output => "output",
        }
    }
}

/// How a guest's run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It finished and exited 0; its output is returned.
    Success,
    /// It exited with a non-zero code.
    Exit(i32),
    /// It trapped.
    Trap(String),
    /// A ceiling stopped it.
    Exceeded(Exceeded),
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct Execution {
    /// How it ended.
    pub ending: Ending,
    /// Stdout, only when the run succeeded: nothing else leaves the sandbox.
    pub output: Option<Vec<u8>>,
    /// Stderr (up to 64 KiB), for diagnostics.
    pub stderr: Vec<u8>,
    /// Wall time in the sandbox.
    pub wall_ms: u64,
    /// Peak total linear memory.
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
}

struct MemoryCap {
    limit: usize,
    used: usize,
    peak: usize,
    hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.used - current.min(self.used) + desired;
        if total > self.limit {
            self.hit = true;
            return Ok(false);
        }
        self.used = total;
        self.peak = self.peak.max(total);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold references, not data; bound them so they cannot exhaust the host.
        Ok(desired <= 1 << 20)
    }
}

struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryCap,
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
    ready: Mutex<HashMap<PathBuf, CommandPre<CallState>>>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").finish_non_exhaustive()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Sandbox {
    /// Builds the engine (epoch interruption on) and starts its ticker.
    ///
    /// # Errors
    /// The engine or linker could not be built.
    pub fn new() -> Result<Sandbox, SandboxError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config).map_err(|e| SandboxError::Engine(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| SandboxError::Engine(e.to_string()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ticking, flag) = (engine.clone(), stop.clone());
        std::thread::Builder::new()
            .name("aegis-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    ticking.increment_epoch();
                }
            })
            .map_err(|e| SandboxError::Engine(e.to_string()))?;
        Ok(Sandbox {
            engine,
            linker,
            ready: Mutex::new(HashMap::new()),
            stop,
        })
    }

    fn prepare(&self, component: &Path) -> Result<CommandPre<CallState>, SandboxError> {
        let mut ready = self.ready.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pre) = ready.get(component) {
            return Ok(pre.clone());
        }
        let failed = |e: wasmtime::Error| SandboxError::Component {
            path: component.to_owned(),
            message: e.to_string(),
        };
        let compiled = Component::from_file(&self.engine, component).map_err(failed)?;
        let pre = self.linker.instantiate_pre(&compiled).map_err(failed)?;
        let pre = CommandPre::new(pre).map_err(failed)?;
        ready.insert(component.to_owned(), pre.clone());
        Ok(pre)
    }

    /// Runs a wasip2 command component under `grant`: `input` on stdin, `args` as its
    /// arguments (after a program name), stdout returned only on success.
    ///
    /// # Errors
    /// A host failure (the component cannot be loaded, a preopen cannot be opened).
    /// Everything the guest does, traps included, is an [`Execution`].
    pub fn run(
        &self,
        component: &Path,
        grant: &Grant,
        input: &[u8],
        args: &[&str],
    ) -> Result<Execution, SandboxError> {
        let pre = self.prepare(component)?;
        let limits = grant.limits();
        let cap = usize::try_from(limits.max_output_bytes).unwrap_or(usize::MAX - 1);
        // One byte over the ceiling tells "exactly at the cap" from "tried to write more".
        let stdout = MemoryOutputPipe::new(cap.saturating_add(1));
        let stderr = MemoryOutputPipe::new(STDERR_CAP);
        let mut wasi = WasiCtx::builder();
        let mut argv = vec!["tool"];
        argv.extend_from_slice(args);
        wasi.args(&argv)
            .stdin(MemoryInputPipe::new(input.to_vec()))
            .stdout(stdout.clone())
            .stderr(stderr.clone());
        for (roots, perms) in [
            (grant.fs_read(), FsPerms::ReadOnly),
            (grant.fs_write(), FsPerms::ReadWrite),
        ] {
            for root in roots {
                let guest = root.to_string_lossy();
                wasi.preopened_dir(root, guest.as_ref(), perms)
                    .map_err(|e| SandboxError::Preopen {
                        path: root.clone(),
                        message: e.to_string(),
                    })?;
            }
        }
        let memory = MemoryCap {
            limit: usize::try_from(limits.max_memory_bytes).unwrap_or(usize::MAX),
            used: 0,
            peak: 0,
            hit: false,
        };
        let mut store = Store::new(
            &self.engine,
            CallState {
                wasi: wasi.build(),
                table: ResourceTable::new(),
                memory,
            },
        );
        store.limiter(|s| &mut s.memory);
        let ticks = limits.max_wall_ms.div_ceil(TICK.as_millis() as u64).max(1);
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();

        let started = Instant::now();
        let result = pre
            .instantiate(&mut store)
            .and_then(|command| command.wasi_cli_run().call_run(&mut store));
        let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let state = store.data();
        let peak_memory_bytes = state.memory.peak as u64;
        let memory_hit = state.memory.hit;
        let written = stdout.contents();
        // A refused memory growth is the ceiling tripping, whether the guest then
        // trapped or handled the failure and exited.
        let ending = if written.len() > cap {
            Ending::Exceeded(Exceeded::Output)
        } else if memory_hit {
            Ending::Exceeded(Exceeded::Memory)
        } else {
            match result {
                Ok(Ok(())) => Ending::Success,
                Ok(Err(())) => Ending::Exit(1),
                Err(e) => {
                    if let Some(exit) = e.downcast_ref::<I32Exit>() {
                        if exit.0 == 0 {
                            Ending::Success
                        } else {
                            Ending::Exit(exit.0)
                        }
                    } else if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                        Ending::Exceeded(Exceeded::WallTime)
                    } else {
                        Ending::Trap(format!("{:#}", e.root_cause()))
                    }
                }
            }
        };
        let output = (ending == Ending::Success).then(|| written.to_vec());
        Ok(Execution {
            ending,
            output,
            stderr: stderr.contents().to_vec(),
            wall_ms,
            peak_memory_bytes,
        })
    }
}
