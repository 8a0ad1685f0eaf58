//! `memtape mcp`: memtape as an MCP server on standard input and output, the way MCP hosts
//! (Claude Code and Desktop, Cursor, ...) launch a local server. The tenant, agent and user
//! come from the flags; the tools, resources and prompt are memtape-server's MCP (the same
//! implementation `/mcp` serves over HTTP).

use anyhow::{Context as _, Result};
use clap::Args;
use memtape_server::{AppState, KeyStore, Limits};

use crate::ctx::{Ctx, ModelArgs, ScopeArgs};
use crate::retrieval::{MissingModel, Tuning, open_indexed};

/// `memtape mcp`'s options.
#[derive(Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub models: ModelArgs,
    #[command(flatten)]
    tuning: Tuning,
}

/// Serves MCP on stdin and stdout until the host closes stdin. Nothing else is written to
/// stdout (it is the protocol); warnings go to stderr.
pub fn mcp(ctx: &Ctx, args: &McpArgs) -> Result<()> {
    let dir = ctx.data_dir()?;
    // The store is created on the first launch (a host starts `memtape mcp` before anyone
    // ran `memtape init`).
    drop(crate::ctx::init(ctx)?);
    // The embedding model (ONNX Runtime) is loaded here, before the runtime starts any
    // thread.
    let engine = open_indexed(ctx, &args.tuning).map_err(|e| {
        if e.downcast_ref::<MissingModel>().is_some() {
            // A host starts the server from its settings: say where the flag goes.
            anyhow::anyhow!(
                "{e}. In the MCP host's settings the flag goes in the server's arguments, \
                 e.g. \"args\": [\"mcp\", \"--model\", \"none\"]"
            )
        } else {
            e
        }
    })?;
    let config = crate::config::load(ctx)?;
    let (model, _) = config.server_model()?;
    let state = AppState::with_model(engine, KeyStore::open(&dir), Limits::default(), true, model);
    state.set_data_dir(dir.clone());
    state.set_mcp_erase_own_session(config.mcp.erase_own_session);
    state.set_lifecycle_config(config.lifecycle.clone());
    // The standard streams are duplicated: `main` holds the lock of Rust's stdout for the
    // other commands' output, and the MCP transport writes from other threads.
    let input = duplicate(&std::io::stdin())?;
    let output = duplicate(&std::io::stdout())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let read = tokio::fs::File::from_std(input);
        let write = tokio::fs::File::from_std(output);
        memtape_server::mcp::serve_stdio(
            state,
            (&ctx.tenant, &ctx.agent, ctx.user.as_deref()),
            read,
            write,
        )
        .await
    })?;
    // A read of stdin still pending on the blocking pool must not keep the process alive.
    runtime.shutdown_background();
    Ok(())
}

/// A new handle on a standard stream, as a file (reads and writes bypass Rust's lock).
#[cfg(unix)]
fn duplicate(stream: &impl std::os::fd::AsFd) -> std::io::Result<std::fs::File> {
    Ok(stream.as_fd().try_clone_to_owned()?.into())
}

/// A new handle on a standard stream, as a file (reads and writes bypass Rust's lock).
#[cfg(windows)]
fn duplicate(stream: &impl std::os::windows::io::AsHandle) -> std::io::Result<std::fs::File> {
    Ok(stream.as_handle().try_clone_to_owned()?.into())
}
